package io.github.fkjoin.engine;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.fkjoin.engine.EngineProtocol.Request;
import org.apache.spark.sql.classic.SparkSession;

/**
 * The engine's stored procedure behind {@link EngineCatalog}, the pair of Python's
 * {@code runtime/engine_procedure.py}: one JSON request in ({@link EngineProtocol}), routed to the class
 * that pairs with the Python module that sent it, one JSON answer out. Errors are thrown: Spark reports
 * them to the caller as the {@code CALL}'s failure.
 *
 * <pre>
 * EngineProcedure.handle(spark, "{\"protocol\": 1, \"action\": \"abort\", \"token\": \"0b6d\"}");
 * // {"protocol":1,"status":"aborted"}
 * </pre>
 */
final class EngineProcedure {
  /** Spark and Delta versions whose internal classes this code was compiled and tested against. */
  static final String TESTED_SPARK = "4.2.";
  static final String TESTED_DELTA = "4.4.";

  private EngineProcedure() {}

  /** Answer one JSON request (see {@link EngineProtocol}). */
  static String handle(SparkSession spark, String requestJson) {
    Request request = EngineProtocol.parse(requestJson);
    requireTestedVersions(spark);
    NetChangeCommit.dropExpired();
    JsonNode fields = request.fields();
    ObjectNode answer = EngineProtocol.answer();
    switch (request.action()) {
      case DESCRIBE -> EngineProtocol.describe(answer);
      case PREPARE -> NetChangeCommit.prepare(spark, fields, answer);
      case COMMIT -> NetChangeCommit.commit(EngineProtocol.required(fields, "token").asText(), answer);
      case ABORT -> NetChangeCommit.abort(EngineProtocol.required(fields, "token").asText(), answer);
      case FILES -> TableFiles.view(spark, fields, answer);
      case FEED_SIZE -> TableFiles.feedSize(spark, fields, answer);
      case WARM_BUILD, WARM_LOOKUP, WARM_ADVANCE, WARM_PEEK, WARM_SETTLE, WARM_DROP ->
          WarmJoinState.handle(spark, request.action(), fields, answer);
      default -> throw new IllegalStateException(
          EngineProtocol.NAME + ": action " + request.action().wire() + " has no handler");
    }
    return answer.toString();
  }

  private static void requireTestedVersions(SparkSession spark) {
    String delta;
    try {
      // io.delta.package holds Delta's version; "package" is a keyword in Java, hence reflection
      delta = String.valueOf(Class.forName("io.delta.package").getMethod("VERSION").invoke(null));
    } catch (ReflectiveOperationException error) {
      throw new IllegalStateException(
          EngineProtocol.NAME + ": Delta Lake is not on this Spark's classpath", error);
    }
    if (!spark.version().startsWith(TESTED_SPARK) || !delta.startsWith(TESTED_DELTA)) {
      throw new IllegalStateException(
          EngineProtocol.NAME + ": the engine jar was built for Spark " + TESTED_SPARK + "x and Delta "
              + TESTED_DELTA + "x; this session runs Spark " + spark.version() + " and Delta " + delta);
    }
  }
}
