package io.github.fkjoin.engine;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.SortedSet;
import java.util.TreeSet;

/**
 * What the engine's two sides say to each other, the twin of Python's {@code runtime/engine_protocol.py}:
 * the actions and each request's fields, the statuses answers carry and the columns both sides name. In
 * one place so that {@code describe} lists exactly what this side speaks, and a Python test holds its own
 * lists equal to that answer.
 *
 * <pre>
 * Request commit = EngineProtocol.parse("{\"protocol\": 1, \"action\": \"commit\", \"token\": \"0b6d\"}");
 * commit.action();                                         // Action.COMMIT
 * EngineProtocol.required(commit.fields(), "token");       // "0b6d"
 * EngineProtocol.answer().put("status", Status.COMMITTED.wire());
 * </pre>
 */
final class EngineProtocol {
  /** The request format; a request of another is refused, so a jar of another version is never misread. */
  static final int PROTOCOL = 1;
  /** The procedure's name, which starts every message this side throws. */
  static final String NAME = "engine";

  /** A row's data file (absolute URI) in a table at a version: what a deletion vector addresses. */
  static final String FILE = "_fkjoin_file";
  /** A row's index in its data file. */
  static final String ROW = "_fkjoin_row";
  /** The net change a refresh writes for a key ({@code insert}, {@code update}, {@code delete}). */
  static final String CHANGE = "_fkjoin_change";
  /** How many output rows a key must hold before the commit (0 or 1). */
  static final String EXPECTED = "_fkjoin_expected";
  /** A key's two hashes, whose sums prove the output's key set. */
  static final List<String> HASHES = List.of("_fkjoin_h1", "_fkjoin_h2");
  /** A changed key's inserts less deletes in its table's change feed. */
  static final String NET = "_fkjoin_net";

  private static final ObjectMapper JSON = new ObjectMapper();

  private EngineProtocol() {}

  /** The actions, each with the fields its request may carry besides {@code protocol} and {@code action}. */
  enum Action {
    DESCRIBE,
    PREPARE("output", "expected_version", "app_id", "seq", "located", "replaced", "rows", "proof"),
    COMMIT("token"),
    ABORT("token"),
    FILES("path", "version", "view", "positions"),
    FEED_SIZE("tables"),
    WARM_BUILD("state", "left", "right", "output", "memory_bytes", "disk_reserve_bytes"),
    WARM_LOOKUP("state", "left", "right", "output", "views"),
    WARM_ADVANCE("state", "token", "output", "version", "removed", "added"),
    WARM_PEEK("state", "output"),
    WARM_SETTLE("state"),
    WARM_DROP("state");

    private final SortedSet<String> fields;

    Action(String... fields) {
      this.fields = Collections.unmodifiableSortedSet(new TreeSet<>(Arrays.asList(fields)));
    }

    /** The action's name in a request. */
    String wire() {
      return name().toLowerCase(Locale.ROOT);
    }

    /** The fields its request may carry, sorted. */
    SortedSet<String> fields() {
      return fields;
    }

    /** Every action's name, sorted. */
    static SortedSet<String> names() {
      SortedSet<String> names = new TreeSet<>();
      for (Action action : values()) {
        names.add(action.wire());
      }
      return names;
    }

    static Action of(String wire) {
      for (Action action : values()) {
        if (action.wire().equals(wire)) {
          return action;
        }
      }
      throw new IllegalArgumentException(
          NAME + ": action '" + wire + "' is not one of " + String.join(", ", names()));
    }
  }

  /** Every status an answer carries. */
  enum Status {
    READY,
    PREPARED,
    COMMITTED,
    MERGE_REQUIRED,
    ABORTED,
    BUILDING,
    REFUSED,
    HELD,
    ABSENT,
    DUPLICATES,
    STALE,
    ADVANCED,
    PERSISTED,
    DROPPED;

    /** The status's name in an answer. */
    String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** A request this side understands: its action, and the whole request object for its fields. */
  record Request(Action action, JsonNode fields) {}

  /**
   * {@code json} as a request, or an {@link IllegalArgumentException} saying why not: not a JSON object,
   * another protocol, an unknown action, or a field the action does not take.
   */
  static Request parse(String json) {
    JsonNode request;
    try {
      request = JSON.readTree(json);
    } catch (JsonProcessingException error) {
      throw new IllegalArgumentException(NAME + ": the request is not JSON: " + error.getMessage());
    }
    if (request == null || !request.isObject()) {
      throw new IllegalArgumentException(NAME + ": the request must be a JSON object");
    }
    JsonNode protocol = request.path("protocol");
    if (!protocol.isIntegralNumber() || protocol.asInt() != PROTOCOL) {
      throw new IllegalArgumentException(
          NAME + ": protocol " + request.get("protocol") + " is not understood (this side speaks "
              + PROTOCOL + "); install the engine jar of the same airflow-provider-fkjoin version");
    }
    Action action = Action.of(request.path("action").asText(""));
    Iterator<String> names = request.fieldNames();
    while (names.hasNext()) {
      String field = names.next();
      if (!field.equals("protocol") && !field.equals("action") && !action.fields().contains(field)) {
        throw new IllegalArgumentException(
            NAME + ": field '" + field + "' is not part of protocol " + PROTOCOL + "'s " + action.wire()
                + " (its fields: " + String.join(", ", action.fields()) + ")");
      }
    }
    return new Request(action, request);
  }

  /** The field {@code field} of {@code request} (or of an object inside it); refused when missing or null. */
  static JsonNode required(JsonNode request, String field) {
    JsonNode value = request.get(field);
    if (value == null || value.isNull()) {
      throw new IllegalArgumentException(NAME + ": field '" + field + "' is required");
    }
    return value;
  }

  /**
   * A size field in bytes: {@code absent} when the request leaves it out, otherwise a positive whole
   * number, or the request is refused naming the field (a setting that is not a size must not fall back
   * to a default in silence).
   *
   * <pre>
   * positiveBytes(request, "memory_bytes", 0);   // 536870912, or 0 when absent
   * </pre>
   */
  static long positiveBytes(JsonNode request, String field, long absent) {
    JsonNode value = request.get(field);
    if (value == null || value.isNull()) {
      return absent;
    }
    if (!value.canConvertToLong() || !value.isIntegralNumber() || value.asLong() <= 0) {
      throw new IllegalArgumentException(
          NAME + ": field '" + field + "' must be a positive number of bytes, not " + value);
    }
    return value.asLong();
  }

  /** A new answer, of this protocol; the action adds its status and fields. */
  static ObjectNode answer() {
    return JSON.createObjectNode().put("protocol", PROTOCOL);
  }

  /**
   * The answer to {@code describe}: {@code ready}, the actions (comma-joined, as older Python sides read
   * them), each action's request fields, every status and the shared columns.
   */
  static void describe(ObjectNode answer) {
    answer.put("status", Status.READY.wire()).put("actions", String.join(",", Action.names()));
    ObjectNode requests = answer.putObject("requests");
    for (String name : Action.names()) {
      ArrayNode fields = requests.putArray(name);
      Action.of(name).fields().forEach(fields::add);
    }
    ArrayNode statuses = answer.putArray("statuses");
    SortedSet<String> names = new TreeSet<>();
    for (Status status : Status.values()) {
      names.add(status.wire());
    }
    names.forEach(statuses::add);
    ObjectNode columns = answer.putObject("columns");
    columns.put("file", FILE).put("row", ROW).put("change", CHANGE).put("expected", EXPECTED).put("net", NET);
    HASHES.forEach(columns.putArray("hashes")::add);
  }
}
