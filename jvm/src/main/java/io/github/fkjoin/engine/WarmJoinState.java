package io.github.fkjoin.engine;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
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
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A foreign-key join's warm state, held in the JVM that runs the engine (a Spark Connect server, or a
 * classic session's driver) between refreshes: Kafka Streams' state stores for KIP-213, as hash maps.
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
 * a thread of its own),
 * {@code warm_lookup} (check the versions, the duplicate keys the feeds could add, and register the
 * affected rows as views; the feeds' changes are kept under a token), {@code warm_advance} (apply the
 * token's changes after the commit), {@code warm_peek} (the versions held) and {@code warm_drop}.
 */
final class WarmJoinState {
  /** Rows held at most per state unless the request says otherwise: a bound on the driver's heap. */
  static final long DEFAULT_MAX_ROWS = 50_000_000L;
  /** A lookup whose refresh never advanced it is dropped after this long. */
  static final long PENDING_TTL_MS = 60L * 60L * 1000L;

  static final String NET = "_fkjoin_net";
  private static final long ROW_BITS = 40;
  private static final long ROW_MASK = (1L << ROW_BITS) - 1;
  private static final long NO_POSITION = -1L;

  private static final Map<String, State> STATES = new ConcurrentHashMap<>();
  private static final Map<String, Pending> PENDING = new ConcurrentHashMap<>();
  /** Builds under way, by state. */
  private static final Map<String, CompletableFuture<Void>> BUILDS = new ConcurrentHashMap<>();
  /** Why the last build of a state did not finish, until the next build. */
  private static final Map<String, String> FAILED = new ConcurrentHashMap<>();
  /** How long the last build of a state took (ms), until a lookup reports it. */
  private static final Map<String, Long> BUILT = new ConcurrentHashMap<>();
  /** A lookup waits this long at most for a build under way; then the refresh scans as usual. */
  static final long BUILD_WAIT_MS = 10L * 60L * 1000L;

  private WarmJoinState() {}

  /** One output's state; every access holds its lock. */
  private static final class State {
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
    /** Left key to its row and its output row's position (the output's key is the left key). */
    final HashMap<Row, Held> left = new HashMap<>();
    final HashMap<Row, Set<Row>> byFk = new HashMap<>();
    final HashMap<Row, Row> right = new HashMap<>();
    /** How many left keys have an output row's position. */
    long positioned;
    final List<String> files = new ArrayList<>();
    final Map<String, Integer> fileIndex = new HashMap<>();
    /** When a refresh last used (or a build finished) this state: the bound drops the oldest first. */
    volatile long lastUsed = System.currentTimeMillis();

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
        int[] rightKey) {
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
    }

    long rows() {
      return left.size() + right.size() + positioned;
    }

    /** The inputs' rows held: what {@code spark.fkjoin.warmState.maxRows} bounds. */
    long inputRows() {
      return left.size() + right.size();
    }

    /** Hold {@code row} for {@code key}; a key held already keeps its output row's position. */
    void putLeft(Row key, Row row) {
      Held held = left.get(key);
      if (held == null) {
        left.put(key, new Held(row));
      } else {
        unindex(key, held.row);
        held.row = row;
      }
      Row fk = project(row, leftFk);
      if (fk != null) {
        byFk.computeIfAbsent(fk, ignored -> new HashSet<>(2)).add(key);
      }
    }

    void removeLeft(Row key) {
      Held old = left.remove(key);
      if (old == null) {
        return;
      }
      if (old.position != NO_POSITION) {
        positioned--;
      }
      unindex(key, old.row);
    }

    private void unindex(Row key, Row row) {
      Row fk = project(row, leftFk);
      Set<Row> keys = fk == null ? null : byFk.get(fk);
      if (keys != null) {
        keys.remove(key);
        if (keys.isEmpty()) {
          byFk.remove(fk);
        }
      }
    }

    /** Place the output row of {@code key}; why not (the output holds the key twice, or a key the left
     * table does not), or null. */
    String putPosition(Row key, String file, long row) {
      Held held = key == null ? null : left.get(key);
      if (held == null) {
        return "the output holds a key the left table does not (or a null key)";
      }
      if (held.position != NO_POSITION) {
        return "the output holds a key twice";
      }
      Integer index = fileIndex.get(file);
      if (index == null) {
        index = files.size();
        files.add(file);
        fileIndex.put(file, index);
      }
      held.position = ((long) index << ROW_BITS) | (row & ROW_MASK);
      positioned++;
      return null;
    }

    /** Forget the output row's position of {@code key} (its row was replaced or deleted). */
    void clearPosition(Row key) {
      Held held = left.get(key);
      if (held != null && held.position != NO_POSITION) {
        held.position = NO_POSITION;
        positioned--;
      }
    }
  }

  /** A left row and where its output row is: a file index and row index packed in one long. */
  private static final class Held {
    Row row;
    long position = NO_POSITION;

    Held(Row row) {
      this.row = row;
    }
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

  static void handle(SparkSession spark, String action, JsonNode request, ObjectNode answer) {
    long oldest = System.currentTimeMillis() - PENDING_TTL_MS;
    PENDING.entrySet().removeIf(entry -> entry.getValue().createdAt() < oldest);
    switch (action) {
      case "warm_build" -> build(spark, request, answer);
      case "warm_lookup" -> lookup(spark, request, answer);
      case "warm_advance" -> advance(spark, request, answer);
      case "warm_peek" -> peek(request, answer);
      default -> {
        String name = NetChangeCommit.required(request, "state").asText();
        awaitBuild(name);
        FAILED.remove(name);
        answer.put("status", STATES.remove(name) != null ? "dropped" : "absent");
      }
    }
  }

  /** The versions a state holds (no Spark job), so a refresh can plan for it before it reads. */
  private static void peek(JsonNode request, ObjectNode answer) {
    String name = NetChangeCommit.required(request, "state").asText();
    awaitBuild(name);
    State state = STATES.get(name);
    if (state == null) {
      answer.put("status", "absent");
      return;
    }
    synchronized (state) {
      answer.put("status", "held").put("held_rows", state.rows());
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
    String name = NetChangeCommit.required(request, "state").asText();
    JsonNode left = NetChangeCommit.required(request, "left");
    JsonNode right = NetChangeCommit.required(request, "right");
    JsonNode output = NetChangeCommit.required(request, "output");
    long maxRows = request.path("max_rows").asLong(DEFAULT_MAX_ROWS);
    awaitBuild(name);
    STATES.remove(name);
    FAILED.remove(name);
    Dataset<Row> leftRows = spark.table(NetChangeCommit.required(left, "view").asText());
    Dataset<Row> rightRows = spark.table(NetChangeCommit.required(right, "view").asText());
    Dataset<Row> located = spark.table(NetChangeCommit.required(output, "view").asText());
    StructType leftSchema = leftRows.schema();
    StructType rightSchema = rightRows.schema();
    State state =
        new State(
            NetChangeCommit.required(output, "id").asText(),
            NetChangeCommit.required(output, "version").asLong(),
            NetChangeCommit.required(left, "id").asText(),
            NetChangeCommit.required(left, "version").asLong(),
            NetChangeCommit.required(right, "id").asText(),
            NetChangeCommit.required(right, "version").asLong(),
            leftSchema,
            rightSchema,
            indices(leftSchema, left.get("key")),
            indices(leftSchema, left.get("fk")),
            indices(rightSchema, right.get("key")));
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
                String refused = fill(name, state, leftRows, rightRows, located, outputKey, maxRows);
                if (refused == null) {
                  state.lastUsed = System.currentTimeMillis();
                  STATES.put(name, state);
                  BUILT.put(name, System.currentTimeMillis() - started);
                } else {
                  FAILED.put(name, "the warm state could not be built: " + refused);
                }
              } catch (Throwable error) {
                FAILED.put(name, "building the warm state failed: " + error);
              } finally {
                BUILDS.remove(name, done);
                done.complete(null);
              }
            },
            "fkjoin-warm-state-build");
    builder.setDaemon(true);
    builder.start();
    answer.put("status", "building");
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
   * Collect the three frames into {@code state}; why not, or null. {@code maxRows} bounds the inputs'
   * rows of all the states of this JVM together: when this one would pass it, the states used least
   * recently are dropped first (their next refresh runs the usual plan and builds them again), and when
   * this one alone passes it, it is not kept.
   */
  private static String fill(
      String name,
      State state,
      Dataset<Row> leftRows,
      Dataset<Row> rightRows,
      Dataset<Row> located,
      int[] outputKey,
      long maxRows) {
    long rows = 0;
    long others = heldByOthers(name);
    for (Iterator<Row> it = leftRows.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, state.leftKey);
      if (key == null || state.left.containsKey(key)) {
        return "the left table repeats a key (or holds a null key)";
      }
      state.putLeft(key, row);
      if (++rows + others > maxRows && (others = makeRoom(name, rows, maxRows)) < 0) {
        return "the inputs hold more than " + maxRows + " rows (spark.fkjoin.warmState.maxRows)";
      }
    }
    for (Iterator<Row> it = rightRows.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, state.rightKey);
      if (key == null || state.right.put(key, row) != null) {
        return "the right table repeats a key (or holds a null key)";
      }
      if (++rows + others > maxRows && (others = makeRoom(name, rows, maxRows)) < 0) {
        return "the inputs hold more than " + maxRows + " rows (spark.fkjoin.warmState.maxRows)";
      }
    }
    int file = located.schema().fieldIndex(NetChangeCommit.FILE);
    int position = located.schema().fieldIndex(NetChangeCommit.ROW);
    for (Iterator<Row> it = located.toLocalIterator(); it.hasNext(); ) {
      Row row = it.next();
      Row key = project(row, outputKey);
      String problem = state.putPosition(key, row.getString(file), row.getLong(position));
      if (problem != null) {
        return problem;
      }
    }
    return null;
  }

  /** The inputs' rows the other states of this JVM hold. */
  private static long heldByOthers(String name) {
    long held = 0;
    for (Map.Entry<String, State> entry : STATES.entrySet()) {
      if (!entry.getKey().equals(name)) {
        held += entry.getValue().inputRows();
      }
    }
    return held;
  }

  /**
   * Drop the least recently used other states until {@code rows} more fit under {@code maxRows}; the
   * rows the others still hold, or -1 when {@code rows} alone pass the bound.
   */
  private static long makeRoom(String name, long rows, long maxRows) {
    if (rows > maxRows) {
      return -1;
    }
    long others = heldByOthers(name);
    while (rows + others > maxRows) {
      Map.Entry<String, State> oldest = null;
      for (Map.Entry<String, State> entry : STATES.entrySet()) {
        if (!entry.getKey().equals(name)
            && (oldest == null || entry.getValue().lastUsed < oldest.getValue().lastUsed)) {
          oldest = entry;
        }
      }
      if (oldest == null) {
        return -1;
      }
      if (STATES.remove(oldest.getKey(), oldest.getValue())) {
        FAILED.put(
            oldest.getKey(),
            "the warm state was dropped to make room for another output's "
                + "(spark.fkjoin.warmState.maxRows bounds all the states of a JVM together)");
      }
      others = heldByOthers(name);
    }
    return others;
  }

  private static void lookup(SparkSession spark, JsonNode request, ObjectNode answer) {
    String name = NetChangeCommit.required(request, "state").asText();
    awaitBuild(name);
    State state = STATES.get(name);
    if (state == null) {
      String failed = FAILED.get(name);
      stale(
          answer,
          failed != null
              ? failed
              : "this JVM holds no warm state for the output (its first refresh here, or a restart)");
      return;
    }
    state.lastUsed = System.currentTimeMillis();
    Long built = BUILT.remove(name);
    if (built != null) {
      answer.put("built_ms", built);
    }
    JsonNode output = NetChangeCommit.required(request, "output");
    JsonNode left = NetChangeCommit.required(request, "left");
    JsonNode right = NetChangeCommit.required(request, "right");
    JsonNode views = NetChangeCommit.required(request, "views");
    synchronized (state) {
      if (STATES.get(name) != state) {
        stale(answer, "the warm state was replaced while this refresh read it");
        return;
      }
      long outputVersion = output.path("version").asLong();
      if (state.outputId.equals(output.path("id").asText()) && state.outputVersion < outputVersion) {
        String behind = followOutput(spark, state, DeltaLog.forTable(spark, name), outputVersion);
        if (behind != null) {
          STATES.remove(name, state);
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
          changes(spark, left, state.leftSchema, state.leftKey, state.left.keySet(), leftChanged, "left",
              answer);
      if (problem == null) {
        problem =
            changes(spark, right, state.rightSchema, state.rightKey, state.right.keySet(), rightChanged,
                "right", answer);
      }
      if (problem != null) {
        if (!answer.has("status")) {
          stale(answer, problem);
        }
        return;
      }
      Set<Row> affected = new LinkedHashSet<>(leftChanged.keySet());
      for (Row changed : rightChanged.keySet()) {
        Set<Row> keys = state.byFk.get(changed);
        if (keys != null) {
          affected.addAll(keys);
        }
      }
      List<Row> leftRows = new ArrayList<>();
      Set<Row> needed = new LinkedHashSet<>(rightChanged.keySet());
      List<Row> located = new ArrayList<>();
      for (Row key : affected) {
        Held held = state.left.get(key);
        Row previous = held == null ? null : held.row;
        Row current = leftChanged.containsKey(key) ? leftChanged.get(key) : previous;
        if (current != null) {
          leftRows.add(current);
          addIfPresent(needed, project(current, state.leftFk));
        }
        if (previous != null && previous != current) {
          addIfPresent(needed, project(previous, state.leftFk));
        }
        if (held != null && held.position != NO_POSITION) {
          long at = held.position;
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
        Row current = rightChanged.containsKey(key) ? rightChanged.get(key) : state.right.get(key);
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
              .add(NetChangeCommit.FILE, DataTypes.StringType, false)
              .add(NetChangeCommit.ROW, DataTypes.LongType, false);
      spark
          .createDataFrame(leftRows, state.leftSchema)
          .createOrReplaceTempView(NetChangeCommit.required(views, "left").asText());
      spark
          .createDataFrame(rightRows, state.rightSchema)
          .createOrReplaceTempView(NetChangeCommit.required(views, "right").asText());
      spark
          .createDataFrame(located, positions)
          .createOrReplaceTempView(NetChangeCommit.required(views, "positions").asText());
      String token = UUID.randomUUID().toString();
      PENDING.put(
          token,
          new Pending(
              name,
              state,
              leftChanged,
              rightChanged,
              NetChangeCommit.required(left, "to").asLong(),
              NetChangeCommit.required(right, "to").asLong(),
              System.currentTimeMillis()));
      answer
          .put("status", "ready")
          .put("token", token)
          .put("left_rows", leftRows.size())
          .put("right_rows", rightRows.size())
          .put("located", located.size())
          .put("held_rows", state.rows());
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
      Set<Row> held,
      Map<Row, Row> changed,
      String role,
      ObjectNode answer) {
    JsonNode keysView = side.get("keys");
    if (keysView == null || keysView.isNull()) {
      return null;
    }
    Dataset<Row> after = spark.table(NetChangeCommit.required(side, "after").asText());
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
      long count = (held.contains(key) ? 1 : 0) + (row.isNullAt(net) ? 0 : row.getLong(net));
      if (count > 1) {
        repeats++;
      }
      changed.put(key, null);
    }
    if (repeats > 0) {
      answer.put("status", "duplicates").put("side", role).put("repeats", repeats);
      return "duplicates";
    }
    for (Row row : after.collectAsList()) {
      changed.put(project(row, keyColumns), row);
    }
    return null;
  }

  private static void advance(SparkSession spark, JsonNode request, ObjectNode answer) {
    Pending pending = PENDING.remove(NetChangeCommit.required(request, "token").asText());
    if (pending == null) {
      answer.put("status", "stale").put("reason", "the refresh's lookup expired");
      return;
    }
    State state = pending.state();
    synchronized (state) {
      if (STATES.get(pending.name()) != state) {
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
          state.right.remove(change.getKey());
        } else {
          state.right.put(change.getKey(), change.getValue());
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
      DeltaLog log = DeltaLog.forTable(spark, NetChangeCommit.required(request, "output").asText());
      List<String> added = new ArrayList<>();
      for (JsonNode file : request.path("added")) {
        added.add(file.asText());
      }
      String problem = readPositions(spark, state, added);
      if (problem == null) {
        state.outputVersion = NetChangeCommit.required(request, "version").asLong();
        problem = followOutput(spark, state, log, log.update(false, Option.empty(), Option.empty()).version());
      }
      if (problem != null) {
        STATES.remove(pending.name(), state);
        stale(answer, problem);
        return;
      }
      answer.put("status", "advanced").put("output_version", state.outputVersion).put("held_rows", state.rows());
    }
  }

  /**
   * Follow the output's commits after the state's version up to {@code latest} when none changed data (the engine's
   * compaction: files rewritten, rows the same): positions in removed files go, the added files' are
   * read. Returns why the state cannot follow, or null.
   */
  private static String followOutput(SparkSession spark, State state, DeltaLog log, long latest) {
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
    Set<Integer> gone = new HashSet<>();
    for (String file : removed) {
      Integer index = state.fileIndex.remove(file);
      if (index != null) {
        gone.add(index);
      }
    }
    if (!gone.isEmpty()) {
      for (Held held : state.left.values()) {
        if (held.position != NO_POSITION && gone.contains((int) (held.position >>> ROW_BITS))) {
          held.position = NO_POSITION;
          state.positioned--;
        }
      }
    }
    String problem = readPositions(spark, state, added);
    if (problem == null) {
      state.outputVersion = latest;
    }
    return problem;
  }

  /** The key and row index of every row of the output's data files ``paths`` (absolute), into the state. */
  private static String readPositions(SparkSession spark, State state, List<String> paths) {
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
    columns.add("_metadata.row_index AS " + NetChangeCommit.ROW);
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
      throw new IllegalArgumentException("net_change: a warm state needs key column names");
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
    answer.put("status", "stale").put("reason", reason);
  }
}
