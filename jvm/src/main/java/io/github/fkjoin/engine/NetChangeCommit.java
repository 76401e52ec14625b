package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.EngineProtocol.CHANGE;
import static io.github.fkjoin.engine.EngineProtocol.EXPECTED;
import static io.github.fkjoin.engine.EngineProtocol.FILE;
import static io.github.fkjoin.engine.EngineProtocol.HASHES;
import static io.github.fkjoin.engine.EngineProtocol.ROW;
import static io.github.fkjoin.engine.EngineProtocol.required;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.fkjoin.engine.EngineProtocol.Status;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Observation;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.util.DeltaFileOperations;
import org.apache.spark.sql.delta.actions.FileAction;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.delta.commands.DMLWithDeletionVectorsHelper$;
import org.apache.spark.sql.delta.commands.DeletionVectorBitmapGenerator$;
import org.apache.spark.sql.delta.commands.DeletionVectorResult;
import org.apache.spark.sql.delta.commands.TouchedFileWithDV;
import org.apache.spark.sql.delta.stats.StatsCollectionUtils;
import org.apache.spark.sql.functions;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A refresh's net changes committed to a keyed Delta output without MERGE, the pair of Python's
 * {@code write/net_changes.py}; in two steps so that the engine can mark the moment between them
 * ({@code committing}):
 *
 * <ol>
 *   <li>{@code prepare}: open a transaction on the output, refuse (status {@code merge_required}, with
 *       the reason) when the output is not at the version the refresh planned on or has a property a
 *       hand-built commit would not maintain; locate the affected keys' rows (a temporary view the
 *       engine built over the output at that version, with each row's file and row index), prove on the
 *       same pass that the output holds exactly the keys the inputs say, write the deletion vectors of
 *       the replaced rows, then the new rows and change data (a second view). Nothing is committed: the
 *       transaction waits under a token;
 *   <li>{@code commit}: commit the prepared actions with the refresh's {@code SetTransaction} as one
 *       {@code UPDATE}. A concurrent commit fails it with Delta's conflict exception;
 *   <li>{@code abort}: drop a prepared transaction (its files stay unreferenced; VACUUM removes them).
 * </ol>
 *
 * <p>Example request ({@link EngineProtocol} parses it, {@link EngineProcedure} routes it here):
 *
 * <pre>
 * {"protocol": 1, "action": "prepare", "output": "/w/out", "expected_version": 7,
 *  "app_id": "fkjoin-3f2a", "seq": 12, "located": "fkjoin_located_9c1e", "replaced": true,
 *  "rows": "fkjoin_rows_9c1e", "proof": {"rows": 11, "h1": "-4411", "h2": "912"}}
 * </pre>
 */
final class NetChangeCommit {
  /**
   * Prepared transactions older than this are dropped: a refresh commits seconds after it prepares, so
   * an older one's client is gone (a killed task), and each holds the output's snapshot and file actions.
   */
  static final long PREPARED_TTL_MS = 30 * 60 * 1000L;

  private static final Map<String, Prepared> PREPARED = new ConcurrentHashMap<>();
  /**
   * Tokens no longer prepared, with what became of them: the committed version (so a commit sent again
   * after its answer was lost is answered the same way) or why it was dropped. Bounded: cleared past
   * {@link #ENDED_LIMIT} entries.
   */
  private static final Map<String, String> ENDED = new ConcurrentHashMap<>();
  static final int ENDED_LIMIT = 10_000;

  private NetChangeCommit() {}

  /** One transaction prepared and not yet committed or aborted. */
  private record Prepared(
      OptimisticTransaction transaction,
      List<Action> actions,
      String appId,
      long seq,
      long createdAt,
      List<String> added) {}

  /** Prepare a commit (see the class comment): a token, or {@code merge_required} with the reason. */
  static void prepare(SparkSession spark, JsonNode request, ObjectNode answer) {
    String output = required(request, "output").asText();
    long expected = required(request, "expected_version").asLong();
    String appId = required(request, "app_id").asText();
    long seq = required(request, "seq").asLong();
    DeltaLog log = DeltaLog.forTable(spark, output);
    OptimisticTransaction transaction = log.startTransaction();
    long version = transaction.snapshot().version();
    if (version != expected) {
      mergeRequired(
          answer,
          "the output is at version " + version + ", not " + expected + " as when the refresh began");
      return;
    }
    String unsupported = unsupportedProperty(transaction);
    if (unsupported != null) {
      mergeRequired(answer, unsupported);
      return;
    }
    // Depend on the whole table and on the refresh's app id, so that Delta fails the commit if another
    // writer or another run of this refresh commits first, even one that changed no file. (The engine
    // knows the app's last seq from the output's log: asking Delta for it would rebuild the state.) The
    // file list is the one the engine keeps warm (TableFiles): no state reconstruction for the version.
    transaction.readWholeTable();
    transaction.readTxn().addOne(appId);
    Seq<AddFile> files =
        seqOf(new ArrayList<>(TableFiles.filesAt(log, transaction.snapshot())._1()));
    List<Action> actions = new ArrayList<>();
    JsonNode located = request.get("located");
    if (located != null && !located.isNull()) {
      Observation observation = new Observation();
      Dataset<Row> rows =
          spark
              .table(located.asText())
              .observe(
                  observation,
                  functions.count(functions.lit(1)).alias("rows"),
                  functions.count_if(functions.col(EXPECTED).equalTo(0)).alias("unexpected"),
                  functions.sum(functions.col(HASHES.get(0))).alias(HASHES.get(0)),
                  functions.sum(functions.col(HASHES.get(1))).alias(HASHES.get(1)));
      Seq<DeletionVectorResult> bitmaps = null;
      if (request.path("replaced").asBoolean(false)) {
        Dataset<Row> replaced = rows.where(functions.col(CHANGE).isin("update", "delete"));
        bitmaps =
            DeletionVectorBitmapGenerator$.MODULE$.buildRowIndexSetsForFilesMatchingCondition(
                spark,
                transaction,
                true,
                replaced,
                files,
                Literal$.MODULE$.TrueLiteral(),
                Option.apply(functions.col(FILE)),
                Option.apply(functions.col(ROW)));
      } else {
        rows.count();
      }
      String disproved = disproved(observation, request.get("proof"));
      if (disproved != null) {
        mergeRequired(answer, disproved);
        return;
      }
      if (bitmaps != null) {
        var helper = DMLWithDeletionVectorsHelper$.MODULE$;
        Seq<TouchedFileWithDV> touched =
            helper.findFilesWithMatchingRows(
                transaction, helper.generateCandidateFileMap(log.dataPath(), files), bitmaps);
        int prefix =
            StatsCollectionUtils.getDataSkippingStringPrefixLength(spark, transaction.metadata());
        Seq<FileAction> vectors = helper.processUnmodifiedData(spark, touched, transaction.snapshot(), prefix)._1();
        actions.addAll(CollectionConverters.asJava(vectors));
      }
    }
    JsonNode newRows = request.get("rows");
    List<String> added = new ArrayList<>();
    if (newRows != null && !newRows.isNull()) {
      String data = log.dataPath().toString();
      for (Action written :
          CollectionConverters.asJava(transaction.writeFiles(spark.table(newRows.asText())))) {
        actions.add(written);
        if (written instanceof AddFile file) {
          added.add(DeltaFileOperations.absolutePath(data, file.path()).toString());
        }
      }
    }
    String token = UUID.randomUUID().toString();
    PREPARED.put(token, new Prepared(transaction, actions, appId, seq, System.currentTimeMillis(), added));
    answer.put("status", Status.PREPARED.wire()).put("token", token).put("version", version);
    ArrayNode layout = answer.putArray("files");
    for (AddFile file : CollectionConverters.asJava(files)) {
      ArrayNode entry = layout.addArray().add(file.size());
      Option<Object> records = file.numPhysicalRecords();
      if (records.isDefined()) {
        entry.add((Long) records.get());
      } else {
        entry.addNull();
      }
      entry.add(file.deletionVector() == null ? 0L : file.deletionVector().cardinality());
    }
  }

  /** Drop a prepared transaction; a token not prepared is answered the same (an abort sent again). */
  static void abort(String token, ObjectNode answer) {
    if (PREPARED.remove(token) != null) {
      ended(token, "aborted");
    }
    answer.put("status", Status.ABORTED.wire());
  }

  /** Commit the transaction prepared under {@code token}; one committed already is answered again. */
  static void commit(String token, ObjectNode answer) {
    Prepared prepared = PREPARED.remove(token);
    if (prepared == null) {
      String ended = ENDED.get(token);
      if (ended != null && ended.startsWith("committed ")) {
        answer.put("status", Status.COMMITTED.wire()).put("version", Long.parseLong(ended.substring(10)));
        return;
      }
      throw new IllegalStateException(
          EngineProtocol.NAME + ": no prepared commit " + token + " ("
              + (ended != null ? ended : "aborted, expired, or prepared on another server") + ")");
    }
    List<Action> actions = new ArrayList<>(prepared.actions());
    Option<Object> now = Option.apply((Object) System.currentTimeMillis());
    actions.add(new SetTransaction(prepared.appId(), prepared.seq(), now));
    long version;
    try {
      version = prepared.transaction().commit(seqOf(actions), new DeltaOperations.Update(Option.empty()));
    } catch (Throwable error) {
      ended(token, "its commit failed: " + error.getClass().getSimpleName());
      throw error;
    }
    ended(token, "committed " + version);
    answer.put("status", Status.COMMITTED.wire()).put("version", version);
    ArrayNode added = answer.putArray("added");
    prepared.added().forEach(added::add);
  }

  private static void ended(String token, String outcome) {
    if (ENDED.size() >= ENDED_LIMIT) {
      ENDED.clear();
    }
    ENDED.put(token, outcome);
  }

  /** Why the output's properties rule out a hand-built commit, or null when they do not. */
  private static String unsupportedProperty(OptimisticTransaction transaction) {
    scala.collection.immutable.Map<String, String> conf = transaction.metadata().configuration();
    if (!"true".equalsIgnoreCase(conf.getOrElse("delta.enableChangeDataFeed", () -> ""))) {
      return "the output's change data feed is off (delta.enableChangeDataFeed)";
    }
    if (!"true".equalsIgnoreCase(conf.getOrElse("delta.enableDeletionVectors", () -> ""))) {
      return "the output does not take deletion vectors (delta.enableDeletionVectors)";
    }
    if ("true".equalsIgnoreCase(conf.getOrElse("delta.enableRowTracking", () -> ""))) {
      return "the output tracks row lineage (delta.enableRowTracking)";
    }
    for (String name :
        new String[] {
          "delta.coordinatedCommits.commitCoordinator-preview", "delta.coordinatedCommits.commitCoordinator"
        }) {
      if (!conf.getOrElse(name, () -> "").isEmpty()) {
        return "the output's commits are coordinated (" + name + ")";
      }
    }
    return null;
  }

  /**
   * Why the located rows disprove the refresh's claim about the output's keys, or null when they bear it
   * out: every affected key with a previous row once, no inserted key, and the same two key-hash sums.
   */
  private static String disproved(Observation observation, JsonNode proof) {
    if (!observation.future().isCompleted()
        || observation.getRow() == null
        || observation.getRow().schema() == null
        || proof == null
        || proof.isNull()) {
      return "the output's keys were not located (no observed metrics); MERGE writes it";
    }
    Row found = observation.getRow();
    long rows = found.getLong(found.fieldIndex("rows"));
    long unexpected = found.getLong(found.fieldIndex("unexpected"));
    long claimed = required(proof, "rows").asLong();
    boolean same = unexpected == 0 && rows == claimed;
    for (String hash : HASHES) {
      Object sum = found.get(found.fieldIndex(hash));
      BigDecimal observed = sum == null ? BigDecimal.ZERO : new BigDecimal(sum.toString());
      same = same && observed.compareTo(new BigDecimal(required(proof, hash.substring(8)).asText())) == 0;
    }
    if (same) {
      return null;
    }
    long bad = unexpected + Math.abs(claimed - (rows - unexpected));
    return (bad == 0 ? "some" : String.valueOf(bad))
        + " affected key(s) are not in the output as the inputs' previous versions say; the output holds "
        + "something other than the last refresh's join";
  }

  private static void mergeRequired(ObjectNode answer, String reason) {
    answer.put("status", Status.MERGE_REQUIRED.wire()).put("reason", reason);
  }

  /** Drop the prepared transactions older than {@link #PREPARED_TTL_MS}. */
  static void dropExpired() {
    long oldest = System.currentTimeMillis() - PREPARED_TTL_MS;
    PREPARED.entrySet().removeIf(entry -> {
      if (entry.getValue().createdAt() >= oldest) {
        return false;
      }
      ended(entry.getKey(), "expired");
      return true;
    });
  }

  private static <T> Seq<T> seqOf(List<T> items) {
    return CollectionConverters.asScala(items).toSeq();
  }
}
