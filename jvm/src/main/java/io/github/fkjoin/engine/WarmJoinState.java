package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.EngineProtocol.FILE;
import static io.github.fkjoin.engine.EngineProtocol.NET;
import static io.github.fkjoin.engine.EngineProtocol.ROW;
import static io.github.fkjoin.engine.EngineProtocol.required;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.fkjoin.engine.EngineProtocol.Status;
import java.util.ArrayList;
import java.io.IOException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.rocksdb.RocksDBException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.RemoveFile;
import org.apache.spark.sql.delta.util.DeltaFileOperations;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A foreign-key join's warm state, held by the JVM that runs the engine (a Spark Connect server, or a
 * classic session's driver) between refreshes: the pair of Python's {@code delta/warm_state.py}. Kafka
 * Streams' state stores for KIP-213, in RocksDB off the heap ({@link JoinStateStore}), within the native
 * memory budget all states of the JVM share and spilling to local disk ({@link StateMemory}), with
 * durable copies beside the output ({@link StateCheckpoints}) and rows as bytes ({@link RowCodec}): its
 * parts, with no Python pair.
 *
 * <p>It holds, for one output, the left rows by left key with an index from foreign key to left keys
 * (KIP-213's subscription store), the right rows by right key, and each output key's data file and row
 * index. A refresh then finds the left rows a changed right row touches, the right rows it needs and
 * the output rows it replaces by lookups proportional to the change, instead of scanning the left table
 * and the output's keys. Each part is valid for one version of its table (and the table's id): a refresh
 * uses the state only when the versions it starts from are exactly those, and advances it after its
 * commit from its own change feeds and the files it wrote (a later commit that changed no data, such as
 * the engine's compaction, is followed through its log). Anything else (another writer, a restarted
 * JVM, a refresh that wrote by MERGE) leaves a state the next refresh will not use: it runs the usual
 * plan and builds the state again.
 *
 * <p>Requests ({@code "action"}): {@code warm_build} (collect the three views given into a new state, on
 * a thread of its own), {@code warm_lookup} (check the versions, the duplicate keys the feeds could add,
 * and register the affected rows as views; the feeds' changes are kept under a token), {@code
 * warm_advance} (apply the token's changes after the commit), {@code warm_peek} (the versions held),
 * {@code warm_settle} (wait for the build and the durable copy) and {@code warm_drop}. For example:
 *
 * <pre>
 * {"protocol": 1, "action": "warm_peek", "state": "/w/out", "output": {"id": "8d1c...", "version": 7}}
 * </pre>
 */
final class WarmJoinState {
  /** A lookup whose refresh never advanced it is dropped after this long. */
  static final long PENDING_TTL_MS = 60L * 60L * 1000L;

  private static final long ROW_BITS = 40;
  private static final long ROW_MASK = (1L << ROW_BITS) - 1;
  private static final long NO_POSITION = -1L;
  /** A build applies its writes in batches of this many. */
  private static final int BATCH = 16_384;
  /** A build checks the state's free disk every this many rows. */
  private static final long DISK_CHECK_ROWS = 1L << 20;

  private static final Map<String, State> STATES = new ConcurrentHashMap<>();
  private static final Map<String, Pending> PENDING = new ConcurrentHashMap<>();
  /** Builds under way, by state. */
  private static final Map<String, CompletableFuture<Void>> BUILDS = new ConcurrentHashMap<>();
  /** Why the last build of a state did not finish, until the next build. */
  private static final Map<String, String> FAILED = new ConcurrentHashMap<>();
  /** How long the last build of a state took (ms), until a lookup reports it. */
  private static final Map<String, Long> BUILT = new ConcurrentHashMap<>();
  /** Checkpoints upload on one thread per JVM, in order. */
  private static final java.util.concurrent.ExecutorService UPLOADS =
      java.util.concurrent.Executors.newSingleThreadExecutor(
          task -> {
            Thread thread = new Thread(task, "fkjoin-state-upload");
            thread.setDaemon(true);
            return thread;
          });
  /** The last checkpoint uploaded per state, and why the last one failed. */
  private static final Map<String, ObjectNode> PERSISTED = new ConcurrentHashMap<>();
  private static final Map<String, String> PERSIST_FAILED = new ConcurrentHashMap<>();
  /** How the last load of a state from its durable copy went, until a lookup reports it. */
  private static final Map<String, ObjectNode> LOADED = new ConcurrentHashMap<>();
  private static final Map<String, Object> LOADING = new ConcurrentHashMap<>();
  private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
      new com.fasterxml.jackson.databind.ObjectMapper();
  /** A lookup waits this long at most for a build under way; then the refresh scans as usual. */
  static final long BUILD_WAIT_MS = 10L * 60L * 1000L;

  private WarmJoinState() {}

  /**
   * One output's state; every access holds its lock. Rows go in and out as {@link Row}s and are held as
   * bytes in its {@link JoinStateStore}; the output's data files its positions name stay on the heap
   * (one entry a file).
   */
  private static final class State implements AutoCloseable {
    final String outputId;
    long outputVersion;
    final String leftId;
    long leftVersion;
    final String rightId;
    long rightVersion;
    final StructType leftSchema;
    final StructType rightSchema;
    final int[] leftKey;
    final int[] leftFk;
    final int[] rightKey;
    final JoinStateStore store;
    final RowCodec leftRows;
    final RowCodec rightRows;
    final RowCodec leftKeys;
    final RowCodec fkKeys;
    final RowCodec rightKeys;
    long leftCount;
    long rightCount;
    /** How many left keys have an output row's position. */
    long positioned;
    /** The output's data files by index; null where a file left the output (its positions are void). */
    final List<String> files = new ArrayList<>();
    final Map<String, Integer> fileIndex = new HashMap<>();
    final Map<Integer, Long> fileRows = new HashMap<>();
    boolean closed;
    /** Names this state's durable copies ({@link StateCheckpoints}): a new id for each build. */
    String stateId = UUID.randomUUID().toString();
    /** The number of the state's last checkpoint. */
    long checkpoint;
    /** The table files already uploaded, local name to uploaded name (used by the upload thread only). */
    final Map<String, String> uploaded = new HashMap<>();

    State(
        String outputId,
        long outputVersion,
        String leftId,
        long leftVersion,
        String rightId,
        long rightVersion,
        StructType leftSchema,
        StructType rightSchema,
        int[] leftKey,
        int[] leftFk,
        int[] rightKey,
        long memoryBytes,
        java.nio.file.Path existing)
        throws IOException, RocksDBException {
      this.outputId = outputId;
      this.outputVersion = outputVersion;
      this.leftId = leftId;
      this.leftVersion = leftVersion;
      this.rightId = rightId;
      this.rightVersion = rightVersion;
      this.leftSchema = leftSchema;
      this.rightSchema = rightSchema;
      this.leftKey = leftKey;
      this.leftFk = leftFk;
      this.rightKey = rightKey;
      this.leftRows = new RowCodec(leftSchema);
      this.rightRows = new RowCodec(rightSchema);
      this.leftKeys = new RowCodec(fields(leftSchema, leftKey));
      this.fkKeys = new RowCodec(fields(leftSchema, leftFk));
      this.rightKeys = new RowCodec(fields(rightSchema, rightKey));
      this.store = new JoinStateStore(memoryBytes, existing);
    }

    long rows() {
      return leftCount + rightCount + positioned;
    }

    Row left(Row key) throws RocksDBException {
      byte[] found = store.left(leftKeys.encode(key));
      return found == null ? null : leftRows.decode(found);
    }

    Row right(Row key) throws RocksDBException {
      byte[] found = store.right(rightKeys.encode(key));
      return found == null ? null : rightRows.decode(found);
    }

    boolean holdsLeft(Row key) throws RocksDBException {
      return store.left(leftKeys.encode(key)) != null;
    }

    boolean holdsRight(Row key) throws RocksDBException {
      return store.right(rightKeys.encode(key)) != null;
    }

    /** The left keys whose rows reference the right key {@code key} (KIP-213's subscriptions). */
    List<Row> subscribers(Row key) {
      List<Row> keys = new ArrayList<>();
      for (byte[] found : store.subscribers(rightKeys.encode(key))) {
        keys.add(leftKeys.decode(found));
      }
      return keys;
    }

    /** A build's left row (the key not held yet). */
    void loadLeft(Row key, Row row) throws RocksDBException {
      Row fk = project(row, leftFk);
      store.loadLeft(leftKeys.encode(key), leftRows.encode(row), fk == null ? null : fkKeys.encode(fk));
      leftCount++;
    }

    /** A build's right row (the key not held yet). */
    void loadRight(Row key, Row row) throws RocksDBException {
      store.loadRight(rightKeys.encode(key), rightRows.encode(row));
      rightCount++;
    }

    /** A build's output position (the key's left row loaded, the key placed once). */
    void loadPosition(Row key, String file, long row) throws RocksDBException {
      store.loadPosition(leftKeys.encode(key), placed(file, row));
    }

    /** The packed position of row {@code row} of {@code file}, counted as held. */
    private long placed(String file, long row) {
      Integer index = fileIndex.get(file);
      if (index == null) {
        index = files.size();
        files.add(file);
        fileIndex.put(file, index);
      }
      fileRows.merge(index, 1L, Long::sum);
      positioned++;
      return ((long) index << ROW_BITS) | (row & ROW_MASK);
    }

    /** Hold {@code row} for {@code key} (a key held already keeps its output row's position). */
    void putLeft(Row key, Row row) throws RocksDBException {
      byte[] encoded = leftKeys.encode(key);
      byte[] old = store.left(encoded);
      if (old == null) {
        leftCount++;
      } else {
        unindex(encoded, leftRows.decode(old));
      }
      store.putLeft(encoded, leftRows.encode(row));
      Row fk = project(row, leftFk);
      if (fk != null) {
        store.subscribe(fkKeys.encode(fk), encoded);
      }
    }

    void removeLeft(Row key) throws RocksDBException {
      byte[] encoded = leftKeys.encode(key);
      byte[] old = store.left(encoded);
      if (old == null) {
        return;
      }
      leftCount--;
      clearPosition(encoded);
      unindex(encoded, leftRows.decode(old));
      store.deleteLeft(encoded);
    }

    private void unindex(byte[] key, Row row) throws RocksDBException {
      Row fk = project(row, leftFk);
      if (fk != null) {
        store.unsubscribe(fkKeys.encode(fk), key);
      }
    }

    /** Hold {@code row} for the right key {@code key}. */
    void putRight(Row key, Row row) throws RocksDBException {
      byte[] encoded = rightKeys.encode(key);
      if (store.right(encoded) == null) {
        rightCount++;
      }
      store.putRight(encoded, rightRows.encode(row));
    }

    void removeRight(Row key) throws RocksDBException {
      byte[] encoded = rightKeys.encode(key);
      if (store.right(encoded) != null) {
        rightCount--;
        store.deleteRight(encoded);
      }
    }

    /** The output row's position of a left key (file index and row index), or {@link #NO_POSITION}. */
    long position(byte[] key) throws RocksDBException {
      long at = store.position(key);
      return at == NO_POSITION || files.get((int) (at >>> ROW_BITS)) == null ? NO_POSITION : at;
    }

    long position(Row key) throws RocksDBException {
      return position(leftKeys.encode(key));
    }

    /** Place the output row of {@code key}; why not (the output holds the key twice, or a key the left
     * table does not), or null. */
    String putPosition(Row key, String file, long row) throws RocksDBException {
      byte[] encoded = key == null ? null : leftKeys.encode(key);
      if (encoded == null || store.left(encoded) == null) {
        return "the output holds a key the left table does not (or a null key)";
      }
      if (position(encoded) != NO_POSITION) {
        return "the output holds a key twice";
      }
      store.putPosition(encoded, placed(file, row));
      return null;
    }

    /** Forget the output row's position of {@code key} (its row was replaced or deleted). */
    void clearPosition(Row key) throws RocksDBException {
      clearPosition(leftKeys.encode(key));
    }

    private void clearPosition(byte[] key) throws RocksDBException {
      long at = position(key);
      if (at != NO_POSITION) {
        fileRows.merge((int) (at >>> ROW_BITS), -1L, Long::sum);
        store.deletePosition(key);
        positioned--;
      }
    }

    /** The data file {@code path} left the output: the positions in it are void. */
    void dropFile(String path) {
      Integer index = fileIndex.remove(path);
      if (index != null) {
        files.set(index, null);
        Long rows = fileRows.remove(index);
        positioned -= rows == null ? 0 : rows;
      }
    }

    /** The state's figures: rows held, and the bytes of native memory (all states') and of disk. */
    void report(ObjectNode answer) {
      answer
          .put("held_rows", rows())
          .put("memory_bytes", StateMemory.usedBytes())
          .put("budget_bytes", StateMemory.budget())
          .put("disk_bytes", store.diskBytes());
    }

    @Override
    public void close() {
      if (!closed) {
        closed = true;
        store.close();
      }
    }
  }

  /** What a checkpoint of {@code state} describes: {@link StateCheckpoints}' manifest, without its files. */
  private static ObjectNode manifest(State state) {
    ObjectNode manifest = JSON.createObjectNode();
    manifest.put("format", 1).put("state_id", state.stateId).put("checkpoint", state.checkpoint);
    manifest.put("output_id", state.outputId).put("output_version", state.outputVersion);
    manifest.put("left_id", state.leftId).put("left_version", state.leftVersion);
    manifest.put("right_id", state.rightId).put("right_version", state.rightVersion);
    manifest.put("left_schema", state.leftSchema.json()).put("right_schema", state.rightSchema.json());
    Map<String, int[]> columns =
        Map.of("left_key", state.leftKey, "left_fk", state.leftFk, "right_key", state.rightKey);
    columns.forEach(
        (field, indices) -> {
          var array = manifest.putArray(field);
          for (int index : indices) {
            array.add(index);
          }
        });
    manifest.put("left_rows", state.leftCount).put("right_rows", state.rightCount);
    var files = manifest.putArray("positions");
    for (int i = 0; i < state.files.size(); i++) {
      String file = state.files.get(i);
      Long rows = state.fileRows.get(i);
      files.addObject().put("path", file).put("rows", file == null || rows == null ? 0 : rows);
    }
    return manifest;
  }

  /**
   * Write {@code state} out as its next checkpoint: a consistent local copy now (under the state's lock,
   * hard links), uploaded under the output by the JVM's one upload thread; {@code wait} blocks until the
   * upload is done. A failed upload is reported by the next lookup; the state itself stays usable.
   */
  private static void persist(SparkSession spark, String name, State state, boolean wait) {
    java.nio.file.Path local;
    ObjectNode manifest;
    synchronized (state) {
      if (state.closed) {
        return;
      }
      state.checkpoint++;
      local = state.store.dir().resolveSibling(state.store.dir().getFileName() + ".c" + state.checkpoint);
      try {
        state.store.checkpoint(local);
      } catch (RocksDBException error) {
        PERSIST_FAILED.put(name, "the state's checkpoint failed: " + error.getMessage());
        return;
      }
      manifest = manifest(state);
    }
    var conf = spark.sessionState().newHadoopConf();
    java.util.concurrent.Future<?> upload =
        UPLOADS.submit(
            () -> {
              long started = System.currentTimeMillis();
              try {
                long bytes = StateCheckpoints.save(conf, name, local.toFile(), manifest, state.uploaded);
                PERSISTED.put(name, JSON.createObjectNode()
                    .put("checkpoint", manifest.path("checkpoint").asLong())
                    .put("output_version", manifest.path("output_version").asLong())
                    .put("uploaded_bytes", bytes)
                    .put("upload_ms", System.currentTimeMillis() - started));
                PERSIST_FAILED.remove(name);
              } catch (Throwable error) {
                PERSIST_FAILED.put(name, "uploading the state's checkpoint failed: " + error);
              } finally {
                StateMemory.delete(local);
              }
            });
    if (wait) {
      awaitQuietly(upload);
    }
  }

  private static void awaitQuietly(java.util.concurrent.Future<?> pending) {
    boolean interrupted = false;
    while (true) {
      try {
        pending.get();
        break;
      } catch (InterruptedException error) {
        interrupted = true;
      } catch (ExecutionException error) {
        break;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * The state of output {@code name} loaded from its newest durable checkpoint that {@code usable}
   * accepts, into this JVM; null when there is none (or it could not be loaded: the reason is kept for
   * the lookup to report).
   */
  private static State load(SparkSession spark, String name, java.util.function.Predicate<JsonNode> usable) {
    long started = System.currentTimeMillis();
    var conf = spark.sessionState().newHadoopConf();
    java.nio.file.Path dir = null;
    try {
      JsonNode manifest = StateCheckpoints.find(conf, name, usable);
      if (manifest == null) {
        return null;
      }
      dir = StateMemory.newStateDir();
      long bytes = StateCheckpoints.download(conf, name, manifest, dir.toFile());
      State state =
          new State(
              manifest.path("output_id").asText(),
              manifest.path("output_version").asLong(),
              manifest.path("left_id").asText(),
              manifest.path("left_version").asLong(),
              manifest.path("right_id").asText(),
              manifest.path("right_version").asLong(),
              (StructType) DataType.fromJson(manifest.path("left_schema").asText()),
              (StructType) DataType.fromJson(manifest.path("right_schema").asText()),
              ints(manifest.path("left_key")),
              ints(manifest.path("left_fk")),
              ints(manifest.path("right_key")),
              0,
              dir);
      state.stateId = manifest.path("state_id").asText();
      state.checkpoint = manifest.path("checkpoint").asLong();
      for (JsonNode table : manifest.path("sst")) {
        state.uploaded.put(table.path("name").asText(), table.path("remote").asText());
      }
      state.leftCount = manifest.path("left_rows").asLong();
      state.rightCount = manifest.path("right_rows").asLong();
      for (JsonNode file : manifest.path("positions")) {
        String path = file.path("path").isNull() ? null : file.path("path").asText();
        int index = state.files.size();
        state.files.add(path);
        if (path != null) {
          state.fileIndex.put(path, index);
          state.fileRows.put(index, file.path("rows").asLong());
          state.positioned += file.path("rows").asLong();
        }
      }
      LOADED.put(name, JSON.createObjectNode()
          .put("loaded_ms", System.currentTimeMillis() - started)
          .put("loaded_bytes", bytes)
          .put("checkpoint", state.checkpoint)
          .put("output_version", state.outputVersion));
      return state;
    } catch (IOException | RocksDBException | RuntimeException error) {
      FAILED.put(name, "the state's durable copy could not be loaded (" + error.getMessage() + ")");
      if (dir != null) {
        StateMemory.delete(dir);
      }
      return null;
    }
  }

  /** The state held for {@code name}, loaded from its durable copy when this JVM holds none. */
  private static State heldOrLoaded(
      SparkSession spark, String name, java.util.function.Predicate<JsonNode> usable) {
    State state = STATES.get(name);
    if (state != null) {
      return state;
    }
    synchronized (LOADING.computeIfAbsent(name, ignored -> new Object())) {
      state = STATES.get(name);
      if (state == null && !BUILDS.containsKey(name)) {
        state = load(spark, name, usable);
        if (state != null) {
          STATES.put(name, state);
        }
      }
      return state;
    }
  }

  private static int[] ints(JsonNode array) {
    int[] values = new int[array.size()];
    for (int i = 0; i < values.length; i++) {
      values[i] = array.get(i).asInt();
    }
    return values;
  }

  /** Forget {@code state} if it is the one held for {@code name}, and free its store. */
  private static void discard(String name, State state) {
    STATES.remove(name, state);
    synchronized (state) {
      state.close();
    }
  }

  private static StructType fields(StructType schema, int[] indices) {
    StructType picked = new StructType();
    for (int index : indices) {
      picked = picked.add(schema.fields()[index]);
    }
    return picked;
  }


  /** A lookup's changes, applied by {@code warm_advance} once the refresh committed. */
  private record Pending(
      String name,
      State state,
      Map<Row, Row> left,
      Map<Row, Row> right,
      long leftTo,
      long rightTo,
      long createdAt) {}


  /** Answer a {@code warm_*} request. */
  static void handle(
      SparkSession spark, EngineProtocol.Action action, JsonNode request, ObjectNode answer) {
    long oldest = System.currentTimeMillis() - PENDING_TTL_MS;
    PENDING.entrySet().removeIf(entry -> entry.getValue().createdAt() < oldest);
    switch (action) {
      case WARM_BUILD -> build(spark, request, answer);
      case WARM_LOOKUP -> guarded(request, answer, () -> lookup(spark, request, answer));
      case WARM_ADVANCE -> guarded(request, answer, () -> advance(spark, request, answer));
      case WARM_PEEK -> peek(spark, request, answer);
      case WARM_SETTLE -> settle(request, answer);
      case WARM_DROP -> drop(request, answer);
      default -> throw new IllegalArgumentException(
          EngineProtocol.NAME + ": " + action.wire() + " is not a warm state's action");
    }
  }

  /** Forget the state in this JVM, after its build under way (its durable copies stay). */
  private static void drop(JsonNode request, ObjectNode answer) {
    String name = required(request, "state").asText();
    awaitBuild(name);
    FAILED.remove(name);
    State held = STATES.remove(name);
    if (held != null) {
      discard(name, held);
    }
    answer.put("status", (held != null ? Status.DROPPED : Status.ABSENT).wire());
  }

  /**
   * Wait for the state's build under way and its checkpoints' uploads: what a process that is about to
   * end asks, so that the next JVM loads the state instead of building it.
   */
  private static void settle(JsonNode request, ObjectNode answer) {
    String name = required(request, "state").asText();
    awaitBuild(name);
    awaitQuietly(UPLOADS.submit(() -> {}));
    ObjectNode persisted = PERSISTED.get(name);
    answer.put("status", (persisted != null ? Status.PERSISTED : Status.ABSENT).wire());
    if (persisted != null) {
      answer.set("persisted", persisted);
    }
    String failed = PERSIST_FAILED.get(name);
    if (failed != null) {
      answer.put("reason", failed);
    }
  }

  /** Why a JVM has no state to serve a refresh with, when no build failed. */
  static final String NO_STATE =
      "this JVM holds no warm state for the output and the output holds no durable copy that matches "
          + "the refresh (its first refresh, or the inputs moved on since the last copy)";

  /** The versions a state holds (no Spark job), so a refresh can plan for it before it reads. */
  private static void peek(SparkSession spark, JsonNode request, ObjectNode answer) {
    String name = required(request, "state").asText();
    awaitBuild(name);
    JsonNode output = request.path("output");
    State state =
        output.isMissingNode()
            ? STATES.get(name)
            : heldOrLoaded(
                spark,
                name,
                manifest ->
                    manifest.path("output_id").asText().equals(output.path("id").asText())
                        && manifest.path("output_version").asLong() <= output.path("version").asLong());
    if (state == null) {
      String failed = FAILED.get(name);
      answer.put("status", Status.ABSENT.wire()).put("reason", failed != null ? failed : NO_STATE);
      return;
    }
    synchronized (state) {
      if (state.closed) {
        answer.put("status", Status.ABSENT.wire()).put("reason", NO_STATE);
        return;
      }
      answer.put("status", Status.HELD.wire());
      state.report(answer);
      answer.putObject("output").put("id", state.outputId).put("version", state.outputVersion);
      answer.putObject("left").put("id", state.leftId).put("version", state.leftVersion);
      answer.putObject("right").put("id", state.rightId).put("version", state.rightVersion);
    }
  }

  /**
   * Start building a state from three views (the inputs' rows and the output's positions, each at the
   * version named) on a thread of its own: the refresh that asked returns at once. A later request for
   * the same state waits for the build ({@link #awaitBuild}); a build that could not finish leaves its
   * reason for the next lookup to report.
   */
  private static void build(SparkSession spark, JsonNode request, ObjectNode answer) {
    String name = required(request, "state").asText();
    JsonNode left = required(request, "left");
    JsonNode right = required(request, "right");
    JsonNode output = required(request, "output");
    long memoryBytes;
    long diskReserve;
    try {
      memoryBytes = EngineProtocol.positiveBytes(request, "memory_bytes", 0);
      diskReserve = EngineProtocol.positiveBytes(request, "disk_reserve_bytes", StateMemory.DISK_RESERVE);
    } catch (IllegalArgumentException error) {
      answer.put("status", Status.REFUSED.wire()).put("reason", error.getMessage());
      return;
    }
    awaitBuild(name);
    State previous = STATES.remove(name);
    if (previous != null) {
      discard(name, previous);
    }
    FAILED.remove(name);
    Dataset<Row> leftRows = spark.table(required(left, "view").asText());
    Dataset<Row> rightRows = spark.table(required(right, "view").asText());
    Dataset<Row> located = spark.table(required(output, "view").asText());
    StructType leftSchema = leftRows.schema();
    StructType rightSchema = rightRows.schema();
    State state;
    try {
      state =
        new State(
            required(output, "id").asText(),
            required(output, "version").asLong(),
            required(left, "id").asText(),
            required(left, "version").asLong(),
            required(right, "id").asText(),
            required(right, "version").asLong(),
            leftSchema,
            rightSchema,
            indices(leftSchema, left.get("key")),
            indices(leftSchema, left.get("fk")),
            indices(rightSchema, right.get("key")),
            memoryBytes,
            null);
    } catch (IOException | RocksDBException | RuntimeException error) {
      FAILED.put(name, "the warm state could not be opened: " + error.getMessage());
      answer.put("status", Status.REFUSED.wire()).put("reason", FAILED.get(name));
      return;
    }
    int[] outputKey = indices(located.schema(), left.get("key"));
    CompletableFuture<Void> done = new CompletableFuture<>();
    BUILDS.put(name, done);
    Thread builder =
        new Thread(
            () -> {
              // the thread inherits the request's job tags and SQL execution id: a build must outlive
              // the request (and a Spark Connect client's session), and run its own executions
              var context = spark.sparkContext();
              context.setLocalProperty("spark.sql.execution.id", null);
              context.setLocalProperty("spark.jobGroup.id", null);
              context.clearJobTags();
              long started = System.currentTimeMillis();
              try {
                String refused = fill(state, leftRows, rightRows, located, outputKey, diskReserve);
                if (refused == null) {
                  STATES.put(name, state);
                  BUILT.put(name, System.currentTimeMillis() - started);
                  persist(spark, name, state, true);
                } else {
                  state.close();
                  FAILED.put(name, "the warm state could not be built: " + refused);
                }
              } catch (Throwable error) {
                state.close();
                FAILED.put(name, "building the warm state failed: " + error);
              } finally {
                BUILDS.remove(name, done);
                done.complete(null);
              }
            },
            "fkjoin-warm-state-build");
    builder.setDaemon(true);
    builder.start();
    answer.put("status", Status.BUILDING.wire());
  }

  /** Wait for a build of the state {@code name} under way, if any (at most {@link #BUILD_WAIT_MS}). */
  private static void awaitBuild(String name) {
    CompletableFuture<Void> pending = BUILDS.get(name);
    if (pending == null) {
      return;
    }
    try {
      pending.get(BUILD_WAIT_MS, TimeUnit.MILLISECONDS);
    } catch (InterruptedException error) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException error) {
      // the lookup finds no state and says so; the build goes on
    }
  }

  /**
   * Collect the three frames into {@code state}; why not, or null. The rows go to the state's store in
   * batches, so the heap holds a batch at most; the store spills to local disk past its share of the
   * memory budget, and the build stops with a reason when that disk runs short. Writes are blind: each
   * table holds a key once at the versions the refresh that asked for the build just committed (its
   * checks made sure), so a build reads nothing back.
   */
  private static String fill(
      State state,
      Dataset<Row> leftRows,
      Dataset<Row> rightRows,
      Dataset<Row> located,
      int[] outputKey,
      long diskReserve)
      throws RocksDBException {
    long rows = 0;
    for (Iterator<Row> it = leftRows.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, state.leftKey);
      if (key == null) {
        return "the left table holds a null key";
      }
      state.loadLeft(key, row);
      String short_ = settle(state, ++rows, diskReserve);
      if (short_ != null) {
        return short_;
      }
    }
    for (Iterator<Row> it = rightRows.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, state.rightKey);
      if (key == null) {
        return "the right table holds a null key";
      }
      state.loadRight(key, row);
      String short_ = settle(state, ++rows, diskReserve);
      if (short_ != null) {
        return short_;
      }
    }
    int file = located.schema().fieldIndex(FILE);
    int position = located.schema().fieldIndex(ROW);
    for (Iterator<Row> it = located.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, outputKey);
      if (key == null) {
        return "the output holds a null key";
      }
      state.loadPosition(key, row.getString(file), row.getLong(position));
      String short_ = settle(state, ++rows, diskReserve);
      if (short_ != null) {
        return short_;
      }
    }
    state.store.settle();
    return null;
  }

  /** Apply a build's batch when full, and check the disk every so often: why the build stops, or null. */
  private static String settle(State state, long rows, long diskReserve) throws RocksDBException {
    if (state.store.pending() >= BATCH) {
      state.store.flush();
    }
    return rows % DISK_CHECK_ROWS == 1 ? StateMemory.diskShort(state.store.dir(), diskReserve) : null;
  }

  /** A lookup or an advance whose store failed: the state is dropped and the refresh told why. */
  private interface StateAction {
    void run() throws RocksDBException;
  }

  private static void guarded(JsonNode request, ObjectNode answer, StateAction action) {
    try {
      action.run();
    } catch (RocksDBException error) {
      String name = required(request, "state").asText();
      State state = STATES.get(name);
      if (state != null) {
        discard(name, state);
      }
      answer.removeAll();
      answer.put("protocol", EngineProtocol.PROTOCOL);
      stale(answer, "the warm state's store failed (" + error.getMessage() + "); it is built again");
    }
  }

  /** Whether a state holds a key of one side. */
  private interface HeldKeys {
    boolean holds(Row key) throws RocksDBException;
  }

  private static void lookup(SparkSession spark, JsonNode request, ObjectNode answer)
      throws RocksDBException {
    String name = required(request, "state").asText();
    JsonNode output = required(request, "output");
    JsonNode left = required(request, "left");
    JsonNode right = required(request, "right");
    JsonNode views = required(request, "views");
    awaitBuild(name);
    State state =
        heldOrLoaded(
            spark,
            name,
            manifest ->
                manifest.path("output_id").asText().equals(output.path("id").asText())
                    && manifest.path("output_version").asLong() <= output.path("version").asLong()
                    && manifest.path("left_version").asLong() == left.path("from").asLong()
                    && manifest.path("right_version").asLong() == right.path("from").asLong());
    if (state == null) {
      String failed = FAILED.get(name);
      stale(
          answer,
          failed != null ? failed : NO_STATE);
      return;
    }
    Long built = BUILT.remove(name);
    if (built != null) {
      answer.put("built_ms", built);
    }
    ObjectNode loaded = LOADED.remove(name);
    if (loaded != null) {
      answer.set("loaded", loaded);
    }
    ObjectNode persisted = PERSISTED.get(name);
    if (persisted != null) {
      answer.set("persisted", persisted);
    }
    String persistFailed = PERSIST_FAILED.get(name);
    if (persistFailed != null) {
      answer.put("persist_error", persistFailed);
    }
    synchronized (state) {
      if (STATES.get(name) != state || state.closed) {
        stale(answer, "the warm state was replaced while this refresh read it");
        return;
      }
      long outputVersion = output.path("version").asLong();
      if (state.outputId.equals(output.path("id").asText()) && state.outputVersion < outputVersion) {
        String behind = followOutput(spark, state, DeltaLog.forTable(spark, name), outputVersion);
        if (behind != null) {
          discard(name, state);
          stale(answer, behind);
          return;
        }
      }
      String reason =
          firstNonNull(
              differs("output", state.outputId, state.outputVersion, output.path("id").asText(),
                  output.path("version").asLong()),
              differs("left", state.leftId, state.leftVersion, left.path("id").asText(),
                  left.path("from").asLong()),
              differs("right", state.rightId, state.rightVersion, right.path("id").asText(),
                  right.path("from").asLong()));
      if (reason != null) {
        stale(answer, reason);
        return;
      }
      Map<Row, Row> leftChanged = new HashMap<>();
      Map<Row, Row> rightChanged = new HashMap<>();
      String problem =
          changes(spark, left, state.leftSchema, state.leftKey, state::holdsLeft, leftChanged, "left", answer);
      if (problem == null) {
        problem =
            changes(spark, right, state.rightSchema, state.rightKey, state::holdsRight, rightChanged, "right",
                answer);
      }
      if (problem != null) {
        if (!answer.has("status")) {
          stale(answer, problem);
        }
        return;
      }
      Set<Row> affected = new LinkedHashSet<>(leftChanged.keySet());
      for (Row changed : rightChanged.keySet()) {
        affected.addAll(state.subscribers(changed));
      }
      List<Row> leftRows = new ArrayList<>();
      Set<Row> needed = new LinkedHashSet<>(rightChanged.keySet());
      List<Row> located = new ArrayList<>();
      for (Row key : affected) {
        Row previous = state.left(key);
        boolean changed = leftChanged.containsKey(key);
        Row current = changed ? leftChanged.get(key) : previous;
        if (current != null) {
          leftRows.add(current);
          addIfPresent(needed, project(current, state.leftFk));
        }
        if (previous != null && changed) {
          addIfPresent(needed, project(previous, state.leftFk));
        }
        long at = state.position(key);
        if (at != NO_POSITION) {
          Object[] values = new Object[key.length() + 2];
          for (int i = 0; i < key.length(); i++) {
            values[i] = key.get(i);
          }
          values[key.length()] = state.files.get((int) (at >>> ROW_BITS));
          values[key.length() + 1] = at & ROW_MASK;
          located.add(RowFactory.create(values));
        }
      }
      List<Row> rightRows = new ArrayList<>();
      for (Row key : needed) {
        Row current = rightChanged.containsKey(key) ? rightChanged.get(key) : state.right(key);
        if (current != null) {
          rightRows.add(current);
        }
      }
      StructType positions = new StructType();
      for (int index : state.leftKey) {
        StructField field = state.leftSchema.fields()[index];
        positions = positions.add(field.name(), field.dataType(), false);
      }
      positions =
          positions
              .add(FILE, DataTypes.StringType, false)
              .add(ROW, DataTypes.LongType, false);
      spark
          .createDataFrame(leftRows, state.leftSchema)
          .createOrReplaceTempView(required(views, "left").asText());
      spark
          .createDataFrame(rightRows, state.rightSchema)
          .createOrReplaceTempView(required(views, "right").asText());
      spark
          .createDataFrame(located, positions)
          .createOrReplaceTempView(required(views, "positions").asText());
      String token = UUID.randomUUID().toString();
      PENDING.put(
          token,
          new Pending(
              name,
              state,
              leftChanged,
              rightChanged,
              required(left, "to").asLong(),
              required(right, "to").asLong(),
              System.currentTimeMillis()));
      answer
          .put("status", Status.READY.wire())
          .put("token", token)
          .put("left_rows", leftRows.size())
          .put("right_rows", rightRows.size())
          .put("located", located.size());
      state.report(answer);
    }
  }

  /**
   * One side's changed keys (the feed's view of keys with {@link #NET}, inserts less deletes) and their
   * rows at the pinned version (the after-image view), into {@code changed} (null: the key is gone).
   * Returns why the state cannot serve, or null; a key the table now holds twice is answered as
   * {@code "duplicates"} (how many, never which: the refresh's usual plan names them).
   */
  private static String changes(
      SparkSession spark,
      JsonNode side,
      StructType schema,
      int[] keyColumns,
      HeldKeys held,
      Map<Row, Row> changed,
      String role,
      ObjectNode answer)
      throws RocksDBException {
    JsonNode keysView = side.get("keys");
    if (keysView == null || keysView.isNull()) {
      return null;
    }
    Dataset<Row> after = spark.table(required(side, "after").asText());
    if (!sameColumns(after.schema(), schema)) {
      return "the " + role + " table's columns are not those the warm state holds";
    }
    Dataset<Row> keys = spark.table(keysView.asText());
    int net = keys.schema().fieldIndex(NET);
    int[] keyIndices = new int[keys.schema().length() - 1];
    for (int i = 0, j = 0; i < keys.schema().length(); i++) {
      if (i != net) {
        keyIndices[j++] = i;
      }
    }
    long repeats = 0;
    for (Row row : keys.collectAsList()) {
      Row key = project(row, keyIndices);
      long count = (held.holds(key) ? 1 : 0) + (row.isNullAt(net) ? 0 : row.getLong(net));
      if (count > 1) {
        repeats++;
      }
      changed.put(key, null);
    }
    if (repeats > 0) {
      answer.put("status", Status.DUPLICATES.wire()).put("side", role).put("repeats", repeats);
      return "duplicates";
    }
    for (Row row : after.collectAsList()) {
      changed.put(project(row, keyColumns), row);
    }
    return null;
  }

  private static void advance(SparkSession spark, JsonNode request, ObjectNode answer)
      throws RocksDBException {
    Pending pending = PENDING.remove(required(request, "token").asText());
    if (pending == null) {
      answer.put("status", Status.STALE.wire()).put("reason", "the refresh's lookup expired");
      return;
    }
    State state = pending.state();
    synchronized (state) {
      if (STATES.get(pending.name()) != state || state.closed) {
        stale(answer, "the warm state was replaced while this refresh wrote");
        return;
      }
      for (Map.Entry<Row, Row> change : pending.left().entrySet()) {
        if (change.getValue() == null) {
          state.removeLeft(change.getKey());
        } else {
          state.putLeft(change.getKey(), change.getValue());
        }
      }
      for (Map.Entry<Row, Row> change : pending.right().entrySet()) {
        if (change.getValue() == null) {
          state.removeRight(change.getKey());
        } else {
          state.putRight(change.getKey(), change.getValue());
        }
      }
      state.leftVersion = pending.leftTo();
      state.rightVersion = pending.rightTo();
      JsonNode removed = request.get("removed");
      if (removed != null && !removed.isNull()) {
        Dataset<Row> keys = spark.table(removed.asText());
        int[] all = new int[keys.schema().length()];
        for (int i = 0; i < all.length; i++) {
          all[i] = i;
        }
        for (Row row : keys.collectAsList()) {
          state.clearPosition(project(row, all));
        }
      }
      DeltaLog log = DeltaLog.forTable(spark, required(request, "output").asText());
      List<String> added = new ArrayList<>();
      for (JsonNode file : request.path("added")) {
        added.add(file.asText());
      }
      String problem = readPositions(spark, state, added);
      if (problem == null) {
        state.outputVersion = required(request, "version").asLong();
        problem = followOutput(spark, state, log, log.update(false, Option.empty(), Option.empty()).version());
      }
      if (problem == null) {
        state.store.flush();
      } else {
        discard(pending.name(), state);
        stale(answer, problem);
        return;
      }
      persist(spark, pending.name(), state, false);
      answer.put("status", Status.ADVANCED.wire()).put("output_version", state.outputVersion);
      state.report(answer);
    }
  }

  /**
   * Follow the output's commits after the state's version up to {@code latest} when none changed data (the engine's
   * compaction: files rewritten, rows the same): positions in removed files go, the added files' are
   * read. Returns why the state cannot follow, or null.
   */
  private static String followOutput(SparkSession spark, State state, DeltaLog log, long latest)
      throws RocksDBException {
    if (latest <= state.outputVersion) {
      return null;
    }
    Set<String> removed = new HashSet<>();
    List<String> added = new ArrayList<>();
    String data = log.dataPath().toString();
    scala.collection.Iterator<Tuple2<Object, scala.collection.immutable.Seq<Action>>> commits =
        log.getChanges(state.outputVersion + 1, latest, Option.empty(), false);
    while (commits.hasNext()) {
      Tuple2<Object, scala.collection.immutable.Seq<Action>> commit = commits.next();
      for (Action action : CollectionConverters.asJava(commit._2())) {
        if (action instanceof AddFile file) {
          if (file.dataChange()) {
            return "output version " + commit._1() + " changed rows the engine did not write";
          }
          added.add(DeltaFileOperations.absolutePath(data, file.path()).toString());
        } else if (action instanceof RemoveFile file) {
          if (file.dataChange()) {
            return "output version " + commit._1() + " changed rows the engine did not write";
          }
          removed.add(DeltaFileOperations.absolutePath(data, file.path()).toString());
        } else if (action instanceof org.apache.spark.sql.delta.actions.Metadata
            || action instanceof org.apache.spark.sql.delta.actions.Protocol) {
          return "output version " + commit._1() + " changed the table's metadata";
        }
      }
    }
    for (String file : removed) {
      state.dropFile(file);
    }
    String problem = readPositions(spark, state, added);
    if (problem == null) {
      state.outputVersion = latest;
    }
    return problem;
  }

  /** The key and row index of every row of the output's data files ``paths`` (absolute), into the state. */
  private static String readPositions(SparkSession spark, State state, List<String> paths)
      throws RocksDBException {
    if (paths.isEmpty()) {
      return null;
    }
    Map<String, String> byName = new HashMap<>();
    for (String path : paths) {
      byName.put(path.substring(path.lastIndexOf('/') + 1), path);
    }
    List<String> columns = new ArrayList<>();
    for (int index : state.leftKey) {
      columns.add("`" + state.leftSchema.fields()[index].name().replace("`", "``") + "`");
    }
    columns.add("_metadata.file_name AS _fkjoin_name");
    columns.add("_metadata.row_index AS " + ROW);
    Dataset<Row> rows =
        spark.read().parquet(paths.toArray(new String[0])).selectExpr(columns.toArray(new String[0]));
    int[] key = new int[state.leftKey.length];
    for (int i = 0; i < key.length; i++) {
      key[i] = i;
    }
    for (Row row : rows.collectAsList()) {
      String file = byName.get(row.getString(key.length));
      String problem =
          file == null ? "unknown file" : state.putPosition(project(row, key), file, row.getLong(key.length + 1));
      if (problem != null) {
        return "the output's new file " + file + ": " + problem;
      }
    }
    return null;
  }


  private static Row project(Row row, int[] columns) {
    Object[] values = new Object[columns.length];
    for (int i = 0; i < columns.length; i++) {
      if (row.isNullAt(columns[i])) {
        return null;
      }
      values[i] = row.get(columns[i]);
    }
    return RowFactory.create(values);
  }

  private static int[] indices(StructType schema, JsonNode names) {
    if (names == null || !names.isArray() || names.isEmpty()) {
      throw new IllegalArgumentException(EngineProtocol.NAME + ": a warm state needs key column names");
    }
    int[] found = new int[names.size()];
    for (int i = 0; i < found.length; i++) {
      found[i] = schema.fieldIndex(names.get(i).asText());
    }
    return found;
  }

  private static boolean sameColumns(StructType found, StructType held) {
    if (found.length() != held.length()) {
      return false;
    }
    for (int i = 0; i < found.length(); i++) {
      if (!found.fields()[i].name().equals(held.fields()[i].name())
          || !found.fields()[i].dataType().sameType(held.fields()[i].dataType())) {
        return false;
      }
    }
    return true;
  }

  private static void addIfPresent(Set<Row> set, Row row) {
    if (row != null) {
      set.add(row);
    }
  }

  private static String differs(String role, String heldId, long heldVersion, String id, long version) {
    if (!heldId.equals(id)) {
      return "the " + role + " table is another table than the warm state's (a new table id)";
    }
    if (heldVersion != version) {
      return "the warm state holds the " + role + " table at version " + heldVersion + ", the refresh "
          + "starts from " + version;
    }
    return null;
  }

  @SafeVarargs
  private static <T> T firstNonNull(T... values) {
    for (T value : values) {
      if (value != null) {
        return value;
      }
    }
    return null;
  }

  private static void stale(ObjectNode answer, String reason) {
    answer.put("status", Status.STALE.wire()).put("reason", reason);
  }
}
