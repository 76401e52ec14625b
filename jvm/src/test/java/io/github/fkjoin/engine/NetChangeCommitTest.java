package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.LocalSpark.call;
import static io.github.fkjoin.engine.LocalSpark.refusal;
import static io.github.fkjoin.engine.LocalSpark.request;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.math.BigDecimal;
import java.nio.file.Path;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code prepare}, {@code commit} and {@code abort} on a small keyed output ({@code id, v}, six rows in
 * one file), with the views a refresh hands over built here as {@code write/net_changes.py} builds them.
 */
@ExtendWith(LocalSpark.class)
class NetChangeCommitTest {
  private static final String APP = "probe-app";

  @TempDir Path tables;

  private String tinyOutput(SparkSession spark) {
    String path = tables.resolve("out").toString();
    spark
        .range(6)
        .selectExpr("id", "CAST(id * 10 AS BIGINT) AS v")
        .coalesce(1)
        .write()
        .format("delta")
        .option("delta.enableChangeDataFeed", "true")
        .option("delta.enableDeletionVectors", "true")
        .save(path);
    return path;
  }

  /** The two key hashes of {@code id} as {@code net_changes.key_hashes} computes them. */
  private static final String HASHES =
      "CAST(xxhash64(id) AS DECIMAL(38,0)) AS _fkjoin_h1, "
          + "CAST(xxhash64('fkjoin', id) AS DECIMAL(38,0)) AS _fkjoin_h2";

  /**
   * A view of the affected keys located in the output at version 0: file, row index, hashes, the change
   * and the rows expected ({@code changes}: SQL rows of id, change, expected).
   */
  private static String located(SparkSession spark, String path, String changes) {
    spark
        .read()
        .format("delta")
        .option("versionAsOf", 0)
        .load(path)
        .selectExpr("id", "_metadata.file_path AS _fkjoin_file", "_metadata.row_index AS _fkjoin_row")
        .createOrReplaceTempView("probe_live");
    spark
        .sql(
            "SELECT id, " + HASHES + ", _fkjoin_change, _fkjoin_expected FROM VALUES " + changes
                + " AS w(id, _fkjoin_change, _fkjoin_expected)")
        .createOrReplaceTempView("probe_wanted");
    spark
        .sql("SELECT * FROM probe_live JOIN probe_wanted USING (id)")
        .createOrReplaceTempView("probe_located");
    return "probe_located";
  }

  /** The proof the output must bear out: {@code ids} there once each. */
  private static ObjectNode proof(SparkSession spark, ObjectNode request, String ids) {
    Row sums =
        spark
            .sql("SELECT count(*), sum(_fkjoin_h1), sum(_fkjoin_h2) FROM (SELECT " + HASHES
                + " FROM VALUES " + ids + " AS t(id))")
            .first();
    request
        .putObject("proof")
        .put("rows", sums.getLong(0))
        .put("h1", ((BigDecimal) sums.get(1)).toPlainString())
        .put("h2", ((BigDecimal) sums.get(2)).toPlainString());
    return request;
  }

  private static ObjectNode prepare(String path, long expectedVersion) {
    return request("prepare")
        .put("output", path)
        .put("expected_version", expectedVersion)
        .put("app_id", APP)
        .put("seq", 1);
  }

  private static List<String> rows(Dataset<Row> frame) {
    return frame.collectAsList().stream().map(Row::toString).sorted().toList();
  }

  @Test
  void replacedRowsAreDeletedByPositionAndTheNewRowsCommittedAsOneUpdate(SparkSession spark) {
    String path = tinyOutput(spark);
    spark
        .sql(
            "SELECT * FROM VALUES (1L, 11L, CAST(NULL AS STRING)), (1L, 11L, 'update_postimage'), "
                + "(1L, 10L, 'update_preimage'), (4L, 40L, 'delete') AS r(id, v, _change_type)")
        .createOrReplaceTempView("probe_rows");
    ObjectNode request =
        prepare(path, 0)
            .put("located", located(spark, path, "(1L, 'update', 1), (4L, 'delete', 1), (2L, NULL, 1)"))
            .put("replaced", true)
            .put("rows", "probe_rows");
    JsonNode prepared = call(spark, proof(spark, request, "(1L), (2L), (4L)"));
    assertEquals("prepared", prepared.path("status").asText(), prepared.toString());
    assertEquals(0, prepared.path("version").asLong());
    JsonNode file = prepared.path("files").path(0);
    assertEquals(1, prepared.path("files").size());
    assertTrue(file.path(0).asLong() > 0, file.toString());
    assertEquals(List.of(6L, 0L), List.of(file.path(1).asLong(), file.path(2).asLong()));

    ObjectNode commit = request("commit").put("token", prepared.path("token").asText());
    JsonNode committed = call(spark, commit);
    assertEquals("committed", committed.path("status").asText(), committed.toString());
    assertEquals(1, committed.path("version").asLong());
    assertEquals(1, committed.path("added").size());
    String added = committed.path("added").path(0).asText();
    assertTrue(added.endsWith(".parquet") && added.contains(path), added);
    assertEquals(
        List.of("[0,0]", "[1,11]", "[2,20]", "[3,30]", "[5,50]"),
        rows(spark.sql("SELECT id, v FROM delta.`" + path + "`")));
    assertEquals(
        List.of("[1,10,update_preimage]", "[1,11,update_postimage]", "[4,40,delete]"),
        rows(
            spark.read().format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
                .load(path).selectExpr("id", "v", "_change_type")));
    Row last = spark.sql("DESCRIBE HISTORY delta.`" + path + "` LIMIT 1").first();
    assertEquals("UPDATE", last.getAs("operation"));
    // the commit sent again (its answer lost on the way back): the same version, nothing written again
    JsonNode again = call(spark, commit);
    assertEquals("committed", again.path("status").asText());
    assertEquals(1, again.path("version").asLong());
    assertEquals(2L, spark.sql("DESCRIBE HISTORY delta.`" + path + "`").count());
  }

  @Test
  void aProofTheOutputDoesNotBearOutAsksForMerge(SparkSession spark) {
    String path = tinyOutput(spark);
    ObjectNode request =
        prepare(path, 0).put("located", located(spark, path, "(1L, 'update', 1)")).put("replaced", true);
    JsonNode answer = call(spark, proof(spark, request, "(1L), (3L)"));
    assertEquals("merge_required", answer.path("status").asText(), answer.toString());
    assertTrue(
        answer.path("reason").asText().contains("not in the output as the inputs' previous versions say"),
        answer.toString());
    assertEquals(1L, spark.sql("DESCRIBE HISTORY delta.`" + path + "`").count());
  }

  @Test
  void anOutputThatMovedAsksForMerge(SparkSession spark) {
    String path = tinyOutput(spark);
    assertEquals(
        "{\"protocol\":1,\"status\":\"merge_required\","
            + "\"reason\":\"the output is at version 0, not 3 as when the refresh began\"}",
        call(spark, prepare(path, 3)).toString());
  }

  @Test
  void anAbortedTransactionCannotBeCommitted(SparkSession spark) {
    String path = tinyOutput(spark);
    spark
        .sql("SELECT * FROM VALUES (6L, 60L, NULL), (6L, 60L, 'insert') AS r(id, v, _change_type)")
        .createOrReplaceTempView("probe_more");
    JsonNode prepared = call(spark, prepare(path, 0).put("rows", "probe_more"));
    assertEquals("prepared", prepared.path("status").asText(), prepared.toString());
    String token = prepared.path("token").asText();
    assertEquals("aborted", call(spark, request("abort").put("token", token)).path("status").asText());
    String message = refusal(() -> call(spark, request("commit").put("token", token)));
    assertTrue(message.contains("engine: no prepared commit " + token + " (aborted)"), message);
    assertEquals(1L, spark.sql("DESCRIBE HISTORY delta.`" + path + "`").count());
  }
}
