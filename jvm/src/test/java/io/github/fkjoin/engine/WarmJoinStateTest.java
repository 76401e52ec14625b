package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.LocalSpark.call;
import static io.github.fkjoin.engine.LocalSpark.request;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The {@code warm_*} actions on a tiny foreign-key join, asked as {@code delta/warm_state.py} asks: orders
 * (left: {@code order_id}, {@code customer_id}, {@code amount}) joined to customers (right: {@code
 * customer_id}, {@code name}), the output a Delta table whose positions the state holds.
 */
@ExtendWith(LocalSpark.class)
class WarmJoinStateTest {
  /** The native memory the JVM's states share (the first state opened fixes it). */
  private static final long MEMORY = 64L << 20;

  @TempDir Path tables;

  /** The inputs as views and their join as a Delta output (with its positions' view); the output's path. */
  private String join(SparkSession spark) {
    inputs(spark);
    String out = tables.resolve("out").toString();
    spark
        .sql("SELECT o.*, c.name FROM probe_orders o LEFT JOIN probe_customers c USING (customer_id)")
        .coalesce(1)
        .write()
        .format("delta")
        .option("delta.enableDeletionVectors", "true")
        .save(out);
    ObjectNode files = request("files").put("path", out).put("version", 0).put("view", "probe_out");
    call(spark, files.put("positions", true));
    spark
        .sql("SELECT order_id, _fkjoin_file, _fkjoin_row FROM probe_out")
        .createOrReplaceTempView("probe_positions");
    return out;
  }

  private static void inputs(SparkSession spark) {
    spark
        .sql(
            "SELECT * FROM VALUES (1L, 10L, 1.0D), (2L, 10L, 2.0D), (3L, 20L, 3.0D) "
                + "AS o(order_id, customer_id, amount)")
        .createOrReplaceTempView("probe_orders");
    spark
        .sql("SELECT * FROM VALUES (10L, 'a'), (20L, 'b') AS c(customer_id, name)")
        .createOrReplaceTempView("probe_customers");
  }

  /** The inputs, and positions of an output that does not exist (for builds that never read them). */
  private static void inputsAndNoOutput(SparkSession spark) {
    inputs(spark);
    spark
        .sql("SELECT 1L AS order_id, 'file:/x' AS _fkjoin_file, 0L AS _fkjoin_row")
        .createOrReplaceTempView("probe_positions");
  }

  private static String tableId(SparkSession spark, String path) {
    return spark.sql("DESCRIBE DETAIL delta.`" + path + "`").first().getAs("id");
  }

  private static ObjectNode build(String state, String outputId, String leftKey) {
    ObjectNode request = request("warm_build").put("state", state).put("memory_bytes", MEMORY);
    ObjectNode left =
        request.putObject("left").put("id", "orders").put("version", 0).put("view", "probe_orders");
    left.putArray("key").add(leftKey);
    left.putArray("fk").add("customer_id");
    ObjectNode right =
        request.putObject("right").put("id", "customers").put("version", 0).put("view", "probe_customers");
    right.putArray("key").add("customer_id");
    request.putObject("output").put("id", outputId).put("version", 0).put("view", "probe_positions");
    return request;
  }

  /** A lookup of no changes from version 0 of each input; a test adds a side's changes. */
  private static ObjectNode lookup(String state, String outputId) {
    ObjectNode request = request("warm_lookup").put("state", state);
    request.putObject("output").put("id", outputId).put("version", 0);
    request.putObject("left").put("id", "orders").put("from", 0).put("to", 0);
    request.putObject("right").put("id", "customers").put("from", 0).put("to", 0);
    request
        .putObject("views")
        .put("left", "probe_warm_left")
        .put("right", "probe_warm_right")
        .put("positions", "probe_warm_positions");
    return request;
  }

  /** {@code request} with {@code side}'s changes up to its version 1: the changed keys' view and their rows'. */
  private static ObjectNode changed(ObjectNode request, String side, String keys, String after) {
    request.withObjectProperty(side).put("to", 1).put("keys", keys).put("after", after);
    return request;
  }

  private static ObjectNode peek(String state, String outputId) {
    ObjectNode request = request("warm_peek").put("state", state);
    request.putObject("output").put("id", outputId).put("version", 0);
    return request;
  }

  private static String status(SparkSession spark, ObjectNode request) {
    return call(spark, request).path("status").asText();
  }

  private static List<String> rows(SparkSession spark, String sql) {
    return spark.sql(sql).collectAsList().stream().map(Row::toString).toList();
  }

  @Test
  void aStateIsBuiltLookedUpAdvancedDroppedAndLoadedFromItsDurableCopy(SparkSession spark) {
    String out = join(spark);
    String outputId = tableId(spark, out);
    assertEquals("absent", status(spark, peek(out, outputId)));

    assertEquals("building", status(spark, build(out, outputId, "order_id")));
    JsonNode settled = call(spark, request("warm_settle").put("state", out));
    assertEquals("persisted", settled.path("status").asText(), settled.toString());
    assertEquals(1, settled.path("persisted").path("checkpoint").asLong());
    JsonNode held = call(spark, peek(out, outputId));
    assertEquals("held", held.path("status").asText(), held.toString());
    assertEquals(3 + 2 + 3, held.path("held_rows").asLong());
    assertEquals(outputId, held.path("output").path("id").asText());
    assertEquals("orders", held.path("left").path("id").asText());
    assertEquals(0, held.path("right").path("version").asLong());

    // customer 10 renamed at version 1 of customers: its two orders are affected, with their positions
    spark.sql("SELECT 10L AS customer_id, 0L AS _fkjoin_net").createOrReplaceTempView("probe_right_keys");
    spark.sql("SELECT 10L AS customer_id, 'A' AS name").createOrReplaceTempView("probe_right_after");
    JsonNode found =
        call(spark, changed(lookup(out, outputId), "right", "probe_right_keys", "probe_right_after"));
    assertEquals("ready", found.path("status").asText(), found.toString());
    assertEquals(2, found.path("left_rows").asLong());
    assertEquals(1, found.path("right_rows").asLong());
    assertEquals(2, found.path("located").asLong());
    assertEquals(List.of("[1]", "[2]"), rows(spark, "SELECT order_id FROM probe_warm_left ORDER BY 1"));
    assertEquals(List.of("[10,A]"), rows(spark, "SELECT * FROM probe_warm_right"));
    assertEquals(
        rows(spark, "SELECT * FROM probe_positions WHERE order_id IN (1, 2) ORDER BY 1"),
        rows(spark, "SELECT * FROM probe_warm_positions ORDER BY 1"));

    ObjectNode advance =
        request("warm_advance")
            .put("state", out)
            .put("token", found.path("token").asText())
            .put("output", out)
            .put("version", 0);
    advance.putArray("added");
    JsonNode advanced = call(spark, advance);
    assertEquals("advanced", advanced.path("status").asText(), advanced.toString());
    assertEquals(1, call(spark, peek(out, outputId)).path("right").path("version").asLong());
    JsonNode again = call(spark, request("warm_settle").put("state", out));
    assertEquals(2, again.path("persisted").path("checkpoint").asLong(), again.toString());

    ObjectNode drop = request("warm_drop").put("state", out);
    assertEquals("dropped", status(spark, drop));
    assertEquals("absent", status(spark, request("warm_peek").put("state", out)));
    // asked with the output, the JVM loads the state's newest durable copy
    JsonNode loaded = call(spark, peek(out, outputId));
    assertEquals("held", loaded.path("status").asText(), loaded.toString());
    assertEquals(1, loaded.path("right").path("version").asLong());
    assertEquals(3 + 2 + 3, loaded.path("held_rows").asLong());
    assertEquals("dropped", status(spark, drop));
    assertEquals("absent", status(spark, drop));
  }

  @Test
  void aLookupTheStateCannotServeSaysWhy(SparkSession spark) {
    String out = join(spark);
    String outputId = tableId(spark, out);
    assertEquals("building", status(spark, build(out, outputId, "order_id")));
    assertEquals("persisted", status(spark, request("warm_settle").put("state", out)));

    // order 1 inserted again: the left table would hold it twice
    spark.sql("SELECT 1L AS order_id, 1L AS _fkjoin_net").createOrReplaceTempView("probe_left_keys");
    spark.sql("SELECT * FROM probe_orders WHERE order_id = 1").createOrReplaceTempView("probe_left_after");
    JsonNode duplicates =
        call(spark, changed(lookup(out, outputId), "left", "probe_left_keys", "probe_left_after"));
    assertEquals("duplicates", duplicates.path("status").asText(), duplicates.toString());
    assertEquals("left", duplicates.path("side").asText());
    assertEquals(1, duplicates.path("repeats").asLong());

    ObjectNode later = lookup(out, outputId);
    later.withObjectProperty("left").put("from", 5).put("to", 6);
    JsonNode stale = call(spark, later);
    assertEquals("stale", stale.path("status").asText(), stale.toString());
    assertEquals(
        "the warm state holds the left table at version 0, the refresh starts from 5",
        stale.path("reason").asText());

    ObjectNode expired =
        request("warm_advance")
            .put("state", out)
            .put("token", "never-looked-up")
            .put("output", out)
            .put("version", 0);
    JsonNode advance = call(spark, expired);
    assertEquals("stale", advance.path("status").asText());
    assertEquals("the refresh's lookup expired", advance.path("reason").asText());
    assertEquals("dropped", status(spark, request("warm_drop").put("state", out)));
  }

  @Test
  void aBuildWhoseKeyIsNoColumnIsRefusedAndTheNextLookupSaysWhy(SparkSession spark) {
    inputsAndNoOutput(spark);
    String state = tables.resolve("refused").toString();
    JsonNode refused = call(spark, build(state, "out", "no_such_column"));
    assertEquals("refused", refused.path("status").asText(), refused.toString());
    String reason = refused.path("reason").asText();
    assertTrue(reason.startsWith("the warm state could not be opened: "), reason);
    assertTrue(reason.contains("no_such_column"), reason);
    JsonNode lookup = call(spark, lookup(state, "out"));
    assertEquals("stale", lookup.path("status").asText());
    assertEquals(reason, lookup.path("reason").asText());
  }

  @Test
  void aSizeThatIsNotAPositiveNumberOfBytesIsRefusedNamingItsField(SparkSession spark) {
    inputsAndNoOutput(spark);
    String state = tables.resolve("sizes").toString();
    for (String field : List.of("memory_bytes", "disk_reserve_bytes")) {
      ObjectNode negative = build(state, "out", "order_id").put(field, -1);
      ObjectNode text = build(state, "out", "order_id").put(field, "1g");
      for (ObjectNode build : List.of(negative, text)) {
        JsonNode refused = call(spark, build);
        assertEquals("refused", refused.path("status").asText(), refused.toString());
        String reason = refused.path("reason").asText();
        assertTrue(reason.contains("field '" + field + "' must be a positive number of bytes"), reason);
      }
    }
    assertEquals("absent", status(spark, peek(state, "out")));
  }

  @Test
  void aBuildShortOfDiskStopsAndTheNextLookupSaysWhy(SparkSession spark) {
    inputsAndNoOutput(spark);
    String state = tables.resolve("short").toString();
    ObjectNode build = build(state, "out", "order_id").put("disk_reserve_bytes", Long.MAX_VALUE);
    assertEquals("building", status(spark, build));
    assertEquals("absent", status(spark, request("warm_settle").put("state", state)));
    JsonNode lookup = call(spark, lookup(state, "out"));
    assertEquals("stale", lookup.path("status").asText(), lookup.toString());
    String reason = lookup.path("reason").asText();
    assertTrue(
        reason.startsWith("the warm state could not be built: the join state's disk (")
            && reason.contains("MiB free, under the"),
        reason);
    assertEquals("absent", status(spark, request("warm_drop").put("state", state)));
  }
}
