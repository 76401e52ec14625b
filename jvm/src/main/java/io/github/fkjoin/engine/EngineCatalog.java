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
 * The engine's JVM side as a Spark catalog of one stored procedure, {@code net_change(request)}: the
 * same SQL call reaches it from a classic session and over Spark Connect, with no py4j and no protocol
 * buffers of our own.
 *
 * <p>A session registers it under a name of its choice and calls it with a JSON request; the result is
 * one row with one JSON string ({@link NetChangeCommit} describes both):
 *
 * <pre>
 * SET spark.sql.catalog.fkjoin_engine = io.github.fkjoin.engine.EngineCatalog;
 * CALL fkjoin_engine.system.net_change(request => '{"protocol": 1, "action": "describe"}');
 * </pre>
 */
public final class EngineCatalog implements ProcedureCatalog {
  /** The procedure's name. */
  public static final String PROCEDURE = "net_change";

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
    return new Identifier[] {Identifier.of(namespace, PROCEDURE)};
  }

  @Override
  public UnboundProcedure loadProcedure(Identifier identifier) {
    if (!PROCEDURE.equals(identifier.name())) {
      throw new IllegalArgumentException(
          "catalog " + name + " has one procedure, " + PROCEDURE + ", not " + identifier.name());
    }
    return new NetChangeProcedure();
  }

  /** {@code net_change(request STRING) -> result STRING}: one request, one answer. */
  static final class NetChangeProcedure implements UnboundProcedure, BoundProcedure {
    private static final StructType RESULT = new StructType().add("result", DataTypes.StringType);

    @Override
    public String name() {
      return PROCEDURE;
    }

    @Override
    public String description() {
      return "airflow-provider-fkjoin's net-change commit: deletion vectors, new rows and change data "
          + "in one Delta commit with the refresh's transaction id";
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
      String answer = NetChangeCommit.handle(SparkSession.active(), input.getUTF8String(0).toString());
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
