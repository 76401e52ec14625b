package io.github.fkjoin.engine;

import static io.github.fkjoin.engine.LocalSpark.call;
import static io.github.fkjoin.engine.LocalSpark.refusal;
import static io.github.fkjoin.engine.LocalSpark.request;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The procedure as a session reaches it: {@code CALL fkjoin_engine.system.engine(request => ...)}. */
@ExtendWith(LocalSpark.class)
class EngineProcedureTest {
  @Test
  void theCatalogListsTheProcedureAndItsAlias() {
    EngineCatalog catalog = new EngineCatalog();
    catalog.initialize("fkjoin_engine", CaseInsensitiveStringMap.empty());
    Identifier[] listed = catalog.listProcedures(new String[] {"system"});
    assertEquals(List.of("engine", "net_change"), Arrays.stream(listed).map(Identifier::name).toList());
    for (Identifier procedure : listed) {
      assertEquals(procedure.name(), catalog.loadProcedure(procedure).name());
    }
    String message = refusal(() -> catalog.loadProcedure(Identifier.of(new String[] {"system"}, "merge")));
    assertTrue(message.contains("has one procedure, engine (also called net_change), not merge"), message);
  }

  @Test
  void theProcedureDescribesItselfUnderBothNames(SparkSession spark) {
    JsonNode described = call(spark, request("describe"));
    assertEquals("ready", described.path("status").asText());
    assertEquals(1, described.path("protocol").asInt());
    assertTrue(described.path("requests").has("warm_build"), described.toString());
    assertEquals(described, call(spark, "net_change", request("describe")));
  }

  @Test
  void aRefusedRequestFailsTheCallWithItsReason(SparkSession spark) {
    String message = refusal(() -> call(spark, request("commit")));
    assertTrue(message.contains("engine: field 'token' is required"), message);
    message = refusal(() -> call(spark, request("commit").put("token", "t").put("force", true)));
    assertTrue(message.contains("engine: field 'force' is not part of protocol 1's commit"), message);
  }

  @Test
  void anAbortOfATokenNotPreparedIsAnsweredAndACommitOfItFails(SparkSession spark) {
    JsonNode aborted = call(spark, request("abort").put("token", "never-prepared"));
    assertEquals("{\"protocol\":1,\"status\":\"aborted\"}", aborted.toString());
    String message = refusal(() -> call(spark, request("commit").put("token", "never-prepared")));
    assertTrue(
        message.contains(
            "engine: no prepared commit never-prepared (aborted, expired, or prepared on another server)"),
        message);
  }
}
