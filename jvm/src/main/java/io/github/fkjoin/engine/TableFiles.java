package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.EngineProtocol.FILE;
import static io.github.fkjoin.engine.EngineProtocol.ROW;
import static io.github.fkjoin.engine.EngineProtocol.required;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.fkjoin.engine.EngineProtocol.Status;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.VersionChecksum;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddCDCFile;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.DeletionVectorDescriptor;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.delta.actions.RemoveFile;
import scala.Option;
import scala.Tuple2;
import org.apache.spark.sql.delta.util.DeltaFileOperations;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Each Delta table's data files at a version, kept warm in the JVM between refreshes, and a table read
 * at that version over exactly those files: the pair of Python's {@code delta/tables.py}.
 *
 * <p>Delta reads a table version by reconstructing its state (a Spark job over the checkpoint and the
 * commits since) and listing its files for each query (Delta's "Filtering files for query" jobs): a
 * plain scan of a small table runs four Spark jobs, one of them the scan. The engine reads each table
 * once per refresh at a pinned version, and the next refresh reads the next versions, so this class keeps
 * the file list of the last version it served per table and advances it by replaying only the commits
 * since (read on the driver, no Spark job), the way Kafka Streams keeps its state stores between
 * records. A table it has not seen, a version older than the one it holds, a table recreated under the
 * same path (a new table id) or replaced by another copy of itself (other commit ids in the checksum
 * files), a version without a checksum file, or a replay whose file count or bytes disagree with the
 * version's checksum is read from Delta's own state once (one job, none when the checksum file lists the
 * files). The read itself is Delta's ({@code DeltaLog.createDataFrame}
 * over the files): deletion vectors, column mapping and {@code _metadata} behave as in any Delta read.
 *
 * <p>Request ({@code "action": "files"}): {@code {"path": "/w/orders", "version": 7, "view":
 * "fkjoin_files_1a2b", "positions": false}} ({@code positions}: add each row's file and row index as
 * {@code _fkjoin_file} and {@code _fkjoin_row}); the answer says how the files were found ({@code "source"}: {@code "held"},
 * {@code "advanced"}, {@code "checksum"} or {@code "state"}) and how many there are. The view is the table at that version,
 * in the calling session.
 */
final class TableFiles {
  /** Tables whose files are kept; the least recently used goes first. */
  static final int MAX_TABLES = 64;
  /**
   * Files kept over all tables (an AddFile with its statistics is about a kilobyte of the driver's heap):
   * the least recently used tables go first, and a table with more files than this is not kept.
   */
  static final int MAX_FILES = 100_000;
  /** Commits replayed at most to advance a table; further behind, Delta's state is cheaper. */
  static final int MAX_REPLAY = 200;

  /**
   * One table's files at a version, with the id Delta wrote into that version's checksum file for the
   * commit ({@code txnId}): a directory replaced by another copy of the table (a restored backup) has the
   * same table id but other commits, and is told apart by it.
   */
  private record Held(String tableId, long version, String commitId, Map<String, AddFile> files) {}

  private static final Map<String, Held> HELD =
      new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Held> eldest) {
          return size() > MAX_TABLES;
        }
      };

  private TableFiles() {}

  static void view(SparkSession spark, JsonNode request, ObjectNode answer) {
    String path = required(request, "path").asText();
    long version = required(request, "version").asLong();
    String view = required(request, "view").asText();
    if (!view.matches("[A-Za-z_][A-Za-z0-9_]*")) {
      throw new IllegalArgumentException(
          EngineProtocol.NAME + " files: view '" + view + "' is not a plain name");
    }
    DeltaLog log = DeltaLog.forTable(spark, path);
    Snapshot snapshot = log.getSnapshotAt(version, Option.empty(), Option.empty(), false);
    Tuple2<Collection<AddFile>, String> found = filesAt(log, snapshot);
    Dataset<Row> frame =
        log.createDataFrame(
            snapshot, CollectionConverters.asScala(List.copyOf(found._1())).toSeq(), false, Option.empty());
    if (request.path("positions").asBoolean(false)) {
      // a view hides a relation's metadata columns: each row's file and row index as plain columns
      frame = frame.selectExpr("*", "_metadata.file_path AS " + FILE, "_metadata.row_index AS " + ROW);
    }
    frame.createOrReplaceTempView(view);
    answer.put("status", Status.READY.wire()).put("files", found._1().size()).put("source", found._2());
  }

  /**
   * How much each table's change feed holds over versions {@code after+1 .. to}, from the commits alone
   * (no Spark job): the bytes Delta's change-feed reader scans (a version's change-data files when it
   * wrote any, else the data files it added and removed). What a refresh weighs its incremental plan by
   * (the Python side's {@code DeltaHandle.feed_bytes}).
   *
   * <p>Request ({@code "action": "feed_size"}): {@code {"tables": [{"path": "/w/orders", "after": 7,
   * "to": 9}]}}; answer: {@code {"status": "ready", "sizes": [2048]}}, a size of -1 where a commit is
   * missing or a removed file's size was not recorded.
   */
  static void feedSize(SparkSession spark, JsonNode request, ObjectNode answer) {
    com.fasterxml.jackson.databind.node.ArrayNode sizes = answer.putArray("sizes");
    for (JsonNode table : required(request, "tables")) {
      sizes.add(
          feedBytes(
              DeltaLog.forTable(spark, required(table, "path").asText()),
              required(table, "after").asLong(),
              required(table, "to").asLong()));
    }
    answer.put("status", Status.READY.wire());
  }

  private static long feedBytes(DeltaLog log, long after, long to) {
    if (to <= after) {
      return 0;
    }
    long feed = 0;
    long expected = after + 1;
    Iterator<Tuple2<Object, scala.collection.immutable.Seq<Action>>> commits =
        log.getChanges(after + 1, to, Option.empty(), true);
    while (commits.hasNext() && expected <= to) {
      Tuple2<Object, scala.collection.immutable.Seq<Action>> commit = commits.next();
      if ((Long) commit._1() != expected) {
        return -1;
      }
      expected++;
      long cdc = 0;
      long data = 0;
      boolean hasCdc = false;
      for (Action action : CollectionConverters.asJava(commit._2())) {
        if (action instanceof AddCDCFile change) {
          hasCdc = true;
          cdc += change.size();
        } else if (action instanceof AddFile add && add.dataChange()) {
          data += add.size();
        } else if (action instanceof RemoveFile remove && remove.dataChange()) {
          if (remove.size().isEmpty()) {
            return -1;
          }
          data += (Long) remove.size().get();
        }
      }
      feed += hasCdc ? cdc : data;
    }
    return expected == to + 1 ? feed : -1;
  }

  /** The files of {@code snapshot}'s version, and how they were found. */
  static Tuple2<Collection<AddFile>, String> filesAt(DeltaLog log, Snapshot snapshot) {
    long version = snapshot.version();
    String tableId = snapshot.metadata().id();
    String key = log.dataPath().toString();
    Option<VersionChecksum> checksum = snapshot.checksumOpt();
    String commitId = commitId(checksum);
    Held held;
    synchronized (HELD) {
      held = HELD.get(key);
    }
    if (held != null && held.tableId().equals(tableId) && commitId != null) {
      if (held.version() == version && held.commitId().equals(commitId)) {
        return new Tuple2<>(held.files().values(), "held");
      }
      if (held.version() < version
          && version - held.version() <= MAX_REPLAY
          && held.commitId().equals(commitIdAt(log, held.version()))) {
        Map<String, AddFile> advanced = replay(log, held, version, checksum.get());
        if (advanced != null) {
          keep(key, new Held(tableId, version, commitId, advanced));
          return new Tuple2<>(advanced.values(), "advanced");
        }
      }
    }
    // a small table's checksum file lists its files (Delta's allFiles.inChecksum): no job then
    boolean listed = checksum.isDefined() && checksum.get().allFiles().isDefined();
    List<AddFile> files =
        listed
            ? CollectionConverters.asJava(checksum.get().allFiles().get())
            : snapshot.allFiles().collectAsList();
    Map<String, AddFile> byKey = new LinkedHashMap<>();
    for (AddFile file : files) {
      byKey.put(fileKey(key, file.path(), file.deletionVector()), file);
    }
    if (commitId != null && (held == null || !held.tableId().equals(tableId) || held.version() <= version)) {
      keep(key, new Held(tableId, version, commitId, byKey));
    }
    return new Tuple2<>(byKey.values(), listed ? "checksum" : "state");
  }

  private static String commitId(Option<VersionChecksum> checksum) {
    return checksum.isDefined() && checksum.get().txnId().isDefined() ? checksum.get().txnId().get() : null;
  }

  /** The commit id of {@code version}'s checksum file (null: none, or the version is gone). */
  private static String commitIdAt(DeltaLog log, long version) {
    try {
      return commitId(log.getSnapshotAt(version, Option.empty(), Option.empty(), false).checksumOpt());
    } catch (RuntimeException error) {
      return null;
    }
  }

  /**
   * {@code held} advanced to {@code version} by the commits after it (adds and removes by path and
   * deletion vector, as Delta's own replay keys them), or null when the replay cannot be trusted: a
   * commit is missing, the table's id changed, or the files' count or bytes disagree with the version's
   * checksum file.
   */
  private static Map<String, AddFile> replay(
      DeltaLog log, Held held, long version, VersionChecksum checksum) {
    Map<String, AddFile> files = new LinkedHashMap<>(held.files());
    String dataPath = log.dataPath().toString();
    long expected = held.version() + 1;
    try {
      Iterator<Tuple2<Object, scala.collection.immutable.Seq<Action>>> commits =
          log.getChanges(held.version() + 1, version, Option.empty(), true);
      while (commits.hasNext()) {
        Tuple2<Object, scala.collection.immutable.Seq<Action>> commit = commits.next();
        long at = (Long) commit._1();
        if (at != expected) {
          return null;
        }
        expected++;
        for (Action action : CollectionConverters.asJava(commit._2())) {
          if (action instanceof AddFile add) {
            files.put(fileKey(dataPath, add.path(), add.deletionVector()), add);
          } else if (action instanceof RemoveFile remove) {
            files.remove(fileKey(dataPath, remove.path(), remove.deletionVector()));
          } else if (action instanceof Metadata metadata && !metadata.id().equals(held.tableId())) {
            return null;
          }
        }
      }
    } catch (RuntimeException error) {
      return null;
    }
    if (expected != version + 1) {
      return null;
    }
    // the version's checksum file, read with the snapshot (Snapshot.numOfFilesIfKnown would run a job)
    long bytes = 0;
    for (AddFile file : files.values()) {
      bytes += file.size();
    }
    if (checksum.numFiles() != files.size() || checksum.tableSizeBytes() != bytes) {
      return null;
    }
    return files;
  }

  /** A file's identity in the table as Delta's own replay has it: absolute path and deletion vector. */
  private static String fileKey(String dataPath, String path, DeletionVectorDescriptor vector) {
    String absolute = DeltaFileOperations.absolutePath(dataPath, path).toUri().normalize().toString();
    return vector == null ? absolute : absolute + "\u0000" + vector.uniqueId();
  }

  private static void keep(String key, Held held) {
    synchronized (HELD) {
      HELD.remove(key);
      if (held.files().size() > MAX_FILES) {
        return;
      }
      HELD.put(key, held);
      long total = 0;
      for (Held each : HELD.values()) {
        total += each.files().size();
      }
      java.util.Iterator<Map.Entry<String, Held>> eldest = HELD.entrySet().iterator();
      while (total > MAX_FILES && eldest.hasNext()) {
        Map.Entry<String, Held> entry = eldest.next();
        if (!entry.getKey().equals(key)) {
          total -= entry.getValue().files().size();
          eldest.remove();
        }
      }
    }
  }

  /** Forget every table (a test's clean start; the next read of each is from Delta's state). */
  static void forget() {
    synchronized (HELD) {
      HELD.clear();
    }
  }
}
