package io.github.fkjoin.engine;

import java.util.Collections;
import java.util.Iterator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.ProcedureCatalog;
import org.apache.spark.sql.connector.catalog.procedures.BoundProcedure;
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The engine's JVM side as a Spark catalog of one stored procedure, {@code engine(request)}: the same
 * SQL call reaches it from a classic session and over Spark Connect, with no py4j and no protocol buffers
 * of our own. Python's {@code runtime/engine_procedure.py} registers it and calls it; {@link
 * EngineProcedure} answers. {@code net_change}, the procedure's first name, stays an alias (the
 * same procedure): an older Python side calls it so.
 *
 * <p>A session registers it under a name of its choice and calls it with a JSON request; the result is
 * one row with one JSON string ({@link EngineProtocol} describes both):
 *
 * <pre>
 * SET spark.sql.catalog.fkjoin_engine = io.github.fkjoin.engine.EngineCatalog;
 * CALL fkjoin_engine.system.engine(request => '{"protocol": 1, "action": "describe"}');
 * </pre>
 */
public final class EngineCatalog implements ProcedureCatalog {
  /** The procedure's name. */
  public static final String PROCEDURE = EngineProtocol.NAME;
  /** The procedure's first name, which an older Python side calls. */
  public static final String ALIAS = "net_change";

  private String name;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listProcedures(String[] namespace) {
    return new Identifier[] {Identifier.of(namespace, PROCEDURE), Identifier.of(namespace, ALIAS)};
  }

  @Override
  public UnboundProcedure loadProcedure(Identifier identifier) {
    if (!PROCEDURE.equals(identifier.name()) && !ALIAS.equals(identifier.name())) {
      throw new IllegalArgumentException(
          "catalog " + name + " has one procedure, " + PROCEDURE + " (also called " + ALIAS + "), not "
              + identifier.name());
    }
    return new Procedure(identifier.name());
  }

  /** {@code engine(request STRING) -> result STRING}: one request, one answer. */
  static final class Procedure implements UnboundProcedure, BoundProcedure {
    private static final StructType RESULT = new StructType().add("result", DataTypes.StringType);
    private final String name;

    Procedure(String name) {
      this.name = name;
    }

    @Override
    public String name() {
      return name;
    }

    @Override
    public String description() {
      return "airflow-provider-fkjoin's engine: net-change commits, warm file lists and join states, "
          + "one JSON request a call";
    }

    @Override
    public BoundProcedure bind(StructType input) {
      return this;
    }

    @Override
    public boolean isDeterministic() {
      return false;
    }

    @Override
    public ProcedureParameter[] parameters() {
      return new ProcedureParameter[] {ProcedureParameter.in("request", DataTypes.StringType).build()};
    }

    @Override
    public Iterator<Scan> call(InternalRow input) {
      if (input.isNullAt(0)) {
        throw new IllegalArgumentException(PROCEDURE + ": request is null");
      }
      String answer = EngineProcedure.handle(SparkSession.active(), input.getUTF8String(0).toString());
      InternalRow row = new GenericInternalRow(new Object[] {UTF8String.fromString(answer)});
      LocalScan scan =
          new LocalScan() {
            @Override
            public InternalRow[] rows() {
              return new InternalRow[] {row};
            }

            @Override
            public StructType readSchema() {
              return RESULT;
            }
          };
      return Collections.<Scan>singletonList(scan).iterator();
    }
  }
}
