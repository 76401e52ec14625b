package io.github.fkjoin.engine;

import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.jupiter.api.function.Executable;

/**
 * The one local Spark session all the engine's test classes share (a session takes seconds to start):
 * Delta on, the engine's catalog registered as {@link #CATALOG}, the warehouse in a temporary folder; JUnit
 * stops it after the last test. A test asks for it as a parameter, and calls the procedure as Python does.
 *
 * <pre>
 * &#64;ExtendWith(LocalSpark.class)
 * class SomeTest {
 *   &#64;Test
 *   void describes(SparkSession spark) {
 *     assertEquals("ready", LocalSpark.call(spark, LocalSpark.request("describe")).path("status").asText());
 *   }
 * }
 * </pre>
 */
final class LocalSpark implements ParameterResolver {
  /** The name the session registers the engine's catalog under (Python's {@code CATALOG}). */
  static final String CATALOG = "fkjoin_engine";

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ExtensionContext.Namespace NAMESPACE =
      ExtensionContext.Namespace.create(LocalSpark.class);

  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
    return parameter.getParameter().getType() == SparkSession.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
    return context
        .getRoot()
        .getStore(NAMESPACE)
        .getOrComputeIfAbsent(Session.class, ignored -> Session.start(), Session.class)
        .spark();
  }

  /** The session and its warehouse; the root store closes it when the run ends. */
  private record Session(SparkSession spark, Path warehouse) implements AutoCloseable {
    static Session start() {
      Path warehouse;
      try {
        warehouse = Files.createTempDirectory("fkjoin-engine-tests");
      } catch (IOException error) {
        throw new UncheckedIOException(error);
      }
      SparkSession spark =
          SparkSession.builder()
              .master("local[1]")
              .appName("fkjoin-engine-tests")
              .config("spark.ui.enabled", "false")
              .config("spark.driver.host", "127.0.0.1")
              .config("spark.driver.bindAddress", "127.0.0.1")
              .config("spark.sql.shuffle.partitions", "1")
              .config("spark.default.parallelism", "1")
              .config("spark.databricks.delta.snapshotPartitions", "1")
              .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
              .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
              .config("spark.sql.catalog." + CATALOG, EngineCatalog.class.getName())
              .config("spark.sql.warehouse.dir", warehouse.toString())
              .getOrCreate();
      return new Session(spark, warehouse);
    }

    @Override
    public void close() {
      spark.stop();
      StateMemory.delete(warehouse);
    }
  }

  /** A new request of the engine's protocol for {@code action}; the test adds its fields. */
  static ObjectNode request(String action) {
    return JSON.createObjectNode().put("protocol", EngineProtocol.PROTOCOL).put("action", action);
  }

  /** The answer of the {@code engine} procedure to {@code request}. */
  static JsonNode call(SparkSession spark, ObjectNode request) {
    return call(spark, EngineCatalog.PROCEDURE, request);
  }

  /**
   * The answer of {@code procedure} to {@code request}, sent as Python sends it: a hex literal decoded on
   * the server, so no quote in it needs escaping.
   */
  static JsonNode call(SparkSession spark, String procedure, ObjectNode request) {
    String hex = HexFormat.of().formatHex(request.toString().getBytes(StandardCharsets.UTF_8));
    String sql =
        "CALL " + CATALOG + ".system." + procedure + "(request => decode(unhex('" + hex + "'), 'UTF-8'))";
    List<Row> rows = spark.sql(sql).collectAsList();
    if (rows.size() != 1) {
      throw new AssertionError("one answer row expected, got " + rows);
    }
    try {
      return JSON.readTree(rows.get(0).getString(0));
    } catch (JsonProcessingException error) {
      throw new AssertionError("the answer is not JSON: " + rows.get(0).getString(0), error);
    }
  }

  /** The messages of what {@code refused} throws, with its causes' (Spark wraps a procedure's error). */
  static String refusal(Executable refused) {
    Throwable error = assertThrows(Throwable.class, refused);
    StringBuilder messages = new StringBuilder();
    for (Throwable cause = error; cause != null; cause = cause.getCause()) {
      messages.append(cause.getMessage()).append('\n');
    }
    return messages.toString();
  }
}
