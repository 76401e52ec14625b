package io.github.fkjoin.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.fkjoin.engine.EngineProtocol.Action;
import io.github.fkjoin.engine.EngineProtocol.Request;
import io.github.fkjoin.engine.EngineProtocol.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The protocol's parsing, its refusals (each naming what it refuses) and its {@code describe} answer. */
class EngineProtocolTest {
  /** Every status, as Python's {@code engine_protocol.Status} lists them. */
  private static final List<String> STATUSES =
      List.of(
          "aborted", "absent", "advanced", "building", "committed", "dropped", "duplicates", "held",
          "merge_required", "persisted", "prepared", "ready", "refused", "stale");

  private static final String PUT = "put(\"status\",";

  private static String refused(String request) {
    return assertThrows(IllegalArgumentException.class, () -> EngineProtocol.parse(request)).getMessage();
  }

  @Test
  void aRequestIsParsedIntoItsActionAndFields() {
    Request request = EngineProtocol.parse("{\"protocol\": 1, \"action\": \"commit\", \"token\": \"0b6d\"}");
    assertEquals(Action.COMMIT, request.action());
    assertEquals("0b6d", EngineProtocol.required(request.fields(), "token").asText());
  }

  @Test
  void aRequestThatIsNotAJsonObjectIsRefused() {
    assertTrue(refused("{\"protocol\": 1,").startsWith("engine: the request is not JSON: "));
    assertEquals("engine: the request must be a JSON object", refused("[1]"));
  }

  @Test
  void aRequestOfAnotherProtocolIsRefused() {
    String message = refused("{\"protocol\": 2, \"action\": \"describe\"}");
    assertTrue(message.startsWith("engine: protocol 2 is not understood (this side speaks 1)"), message);
    assertTrue(refused("{\"action\": \"describe\"}").startsWith("engine: protocol null is not understood"));
  }

  @Test
  void anUnknownActionIsRefusedWithTheActionsThereAre() {
    assertEquals(
        "engine: action 'rollback' is not one of abort, commit, describe, feed_size, files, prepare, "
            + "warm_advance, warm_build, warm_drop, warm_lookup, warm_peek, warm_settle",
        refused("{\"protocol\": 1, \"action\": \"rollback\"}"));
  }

  @Test
  void aFieldTheActionDoesNotTakeIsRefusedByName() {
    assertEquals(
        "engine: field 'force' is not part of protocol 1's commit (its fields: token)",
        refused("{\"protocol\": 1, \"action\": \"commit\", \"token\": \"t\", \"force\": true}"));
  }

  @Test
  void aMissingOrNullRequiredFieldIsRefusedByName() {
    for (String request :
        List.of(
            "{\"protocol\": 1, \"action\": \"commit\"}",
            "{\"protocol\": 1, \"action\": \"commit\", \"token\": null}")) {
      JsonNode fields = EngineProtocol.parse(request).fields();
      IllegalArgumentException error =
          assertThrows(IllegalArgumentException.class, () -> EngineProtocol.required(fields, "token"));
      assertEquals("engine: field 'token' is required", error.getMessage());
    }
  }

  @Test
  void describeListsEveryActionWithItsFieldsEveryStatusAndTheSharedColumns() throws IOException {
    ObjectNode answer = EngineProtocol.answer();
    EngineProtocol.describe(answer);
    assertEquals(1, answer.path("protocol").asInt());
    assertEquals("ready", answer.path("status").asText());
    List<String> actions = List.of(answer.path("actions").asText().split(","));
    assertEquals(
        List.of(
            "abort", "commit", "describe", "feed_size", "files", "prepare", "warm_advance", "warm_build",
            "warm_drop", "warm_lookup", "warm_peek", "warm_settle"),
        actions);
    assertEquals(actions, names(answer.path("requests").fieldNames()));
    ObjectMapper json = new ObjectMapper();
    assertEquals(
        json.readTree(
            "[\"app_id\", \"expected_version\", \"located\", \"output\", \"proof\", \"replaced\", "
                + "\"rows\", \"seq\"]"),
        answer.path("requests").path("prepare"));
    assertEquals(json.readTree("[]"), answer.path("requests").path("describe"));
    for (Action action : Action.values()) {
      assertEquals(
          List.copyOf(action.fields()), names(answer.path("requests").path(action.wire()).elements()));
    }
    assertEquals(STATUSES, names(answer.path("statuses").elements()));
    assertEquals(
        json.readTree(
            "{\"file\": \"_fkjoin_file\", \"row\": \"_fkjoin_row\", \"change\": \"_fkjoin_change\", "
                + "\"expected\": \"_fkjoin_expected\", \"net\": \"_fkjoin_net\", "
                + "\"hashes\": [\"_fkjoin_h1\", \"_fkjoin_h2\"]}"),
        answer.path("columns"));
  }

  /**
   * Every answer's status goes through {@link Status} (no status is a string literal in the code), and
   * every status the enum lists is one some action answers.
   */
  @Test
  void theStatusesTheCodeAnswersAreExactlyTheEnums() throws IOException {
    String basedir = System.getProperty("basedir");
    assertTrue(basedir != null, "the tests need -Dbasedir=<the jvm folder> (Maven's surefire sets it)");
    Path sources = Path.of(basedir, "src/main/java/io/github/fkjoin/engine");
    Pattern used = Pattern.compile("Status\\.([A-Z_]+)");
    Set<String> answered = new TreeSet<>();
    int puts = 0;
    try (Stream<Path> files = Files.list(sources)) {
      for (Path file : (Iterable<Path>) files::iterator) {
        String code = Files.readString(file);
        for (int at = code.indexOf(PUT); at >= 0; at = code.indexOf(PUT, at + 1), puts++) {
          String put = code.substring(at, code.indexOf(';', at));
          int wire = put.indexOf(".wire()");
          String status = wire < 0 ? put : put.substring(PUT.length(), wire);
          assertTrue(
              wire >= 0 && status.contains("Status.") && !status.contains("\""),
              file.getFileName() + " answers a status that is not a Status: " + put);
        }
        if (!file.getFileName().toString().equals("EngineProtocol.java")) {
          for (Matcher status = used.matcher(code); status.find(); ) {
            answered.add(Status.valueOf(status.group(1)).wire());
          }
        }
      }
    }
    assertTrue(puts > 10, "the code's answers were not found under " + sources);
    assertEquals(STATUSES, List.copyOf(answered));
  }

  private static List<String> names(Iterator<?> items) {
    List<String> names = new ArrayList<>();
    items.forEachRemaining(
        item -> names.add(item instanceof JsonNode node ? node.asText() : item.toString()));
    return names;
  }
}
