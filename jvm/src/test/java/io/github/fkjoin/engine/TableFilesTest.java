package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.LocalSpark.call;
import static io.github.fkjoin.engine.LocalSpark.refusal;
import static io.github.fkjoin.engine.LocalSpark.request;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code files} (a table at a version as a view over the files the JVM keeps) and {@code feed_size}, on a
 * table of three rows at version 0 and five at version 1.
 */
@ExtendWith(LocalSpark.class)
class TableFilesTest {
  @TempDir Path tables;

  private String twoVersions(SparkSession spark) {
    String path = tables.resolve("t").toString();
    spark
        .range(3)
        .coalesce(1)
        .write()
        .format("delta")
        .option("delta.enableDeletionVectors", "true")
        .save(path);
    spark.range(3, 5).coalesce(1).write().format("delta").mode("append").save(path);
    return path;
  }

  private static ObjectNode files(String path, long version, String view) {
    return request("files").put("path", path).put("version", version).put("view", view);
  }

  @Test
  void aTableIsReadAtEachVersionOverTheFilesKeptAndAdvanced(SparkSession spark) {
    String path = twoVersions(spark);
    TableFiles.forget();
    JsonNode first = call(spark, files(path, 0, "probe_v0"));
    assertEquals("ready", first.path("status").asText(), first.toString());
    assertEquals(1, first.path("files").asInt());
    assertEquals(List.of(0L, 1L, 2L), ids(spark, "probe_v0"));

    JsonNode second = call(spark, files(path, 1, "probe_v1"));
    assertEquals(2, second.path("files").asInt());
    assertEquals("advanced", second.path("source").asText(), second.toString());
    assertEquals(List.of(0L, 1L, 2L, 3L, 4L), ids(spark, "probe_v1"));
    assertEquals("held", call(spark, files(path, 1, "probe_v1")).path("source").asText());
  }

  @Test
  void positionsAreEachRowsFileAndRowIndex(SparkSession spark) {
    String path = twoVersions(spark);
    call(spark, files(path, 1, "probe_positions").put("positions", true));
    List<Row> rows =
        spark
            .sql("SELECT id, _fkjoin_file, _fkjoin_row FROM probe_positions ORDER BY id")
            .collectAsList();
    assertEquals(5, rows.size());
    for (Row row : rows) {
      long id = row.getLong(0);
      assertEquals(id < 3 ? id : id - 3, row.getLong(2), row.toString());
      String file = row.getString(1);
      assertTrue(file.startsWith("file:") && file.endsWith(".parquet"), row.toString());
    }
    assertEquals(2L, spark.sql("SELECT DISTINCT _fkjoin_file FROM probe_positions").count());
  }

  @Test
  void aViewNameThatIsNotPlainIsRefused(SparkSession spark) {
    String path = twoVersions(spark);
    String message = refusal(() -> call(spark, files(path, 0, "probe; DROP")));
    assertTrue(message.contains("engine files: view 'probe; DROP' is not a plain name"), message);
  }

  @Test
  void feedSizeIsTheBytesTheFeedReadsOrMinusOneWhereCommitsAreMissing(SparkSession spark) {
    String path = twoVersions(spark);
    ObjectNode request = request("feed_size");
    ArrayNode asked = request.putArray("tables");
    asked.addObject().put("path", path).put("after", 0).put("to", 1);
    asked.addObject().put("path", path).put("after", 1).put("to", 1);
    asked.addObject().put("path", path).put("after", 0).put("to", 5);
    JsonNode answer = call(spark, request);
    assertEquals("ready", answer.path("status").asText(), answer.toString());
    // version 1 appended one file (ids 3 and 4), and wrote no change data: the feed reads that file
    Row appended =
        spark.sql("SELECT DISTINCT _metadata.file_size FROM delta.`" + path + "` WHERE id >= 3").first();
    assertEquals(appended.getLong(0), answer.path("sizes").path(0).asLong());
    assertEquals(0, answer.path("sizes").path(1).asLong());
    assertEquals(-1, answer.path("sizes").path(2).asLong());
  }

  private static List<Long> ids(SparkSession spark, String view) {
    return spark.table(view).collectAsList().stream().map(row -> row.getLong(0)).sorted().toList();
  }
}
