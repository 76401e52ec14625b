package io.github.fkjoin.engine;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;

/**
 * Rows of one schema as bytes and back: Spark's own {@code UnsafeRow} form, which Spark's state stores
 * also write. Equal values give equal bytes (the writer zeroes its padding), so a key's bytes are a
 * RocksDB key. Not thread-safe: each state keeps its own codecs and uses them under its lock.
 *
 * <pre>
 * RowCodec keys = new RowCodec(new StructType().add("id", "long"));
 * byte[] bytes = keys.encode(RowFactory.create(7L));  // 16 bytes: a null bitmap word and the long
 * keys.decode(bytes);                                 // [7]
 * </pre>
 *
 * <p>A part of {@link WarmJoinState}, with no Python module of its own: Python reaches it through the
 * {@code warm_*} actions.
 */
final class RowCodec {
  private final int fields;
  private final ExpressionEncoder.Serializer<Row> serializer;
  private final ExpressionEncoder.Deserializer<Row> deserializer;

  RowCodec(StructType schema) {
    ExpressionEncoder<Row> encoder = ExpressionEncoder.apply(schema, true);
    this.fields = schema.length();
    this.serializer = encoder.createSerializer();
    this.deserializer =
        encoder.resolveAndBind(encoder.resolveAndBind$default$1(), encoder.resolveAndBind$default$2())
            .createDeserializer();
  }

  /** The row's bytes (a copy: the serializer reuses its buffer). */
  byte[] encode(Row row) {
    InternalRow internal = serializer.apply(row);
    UnsafeRow unsafe = (UnsafeRow) internal;
    byte[] bytes = new byte[unsafe.getSizeInBytes()];
    unsafe.writeToMemory(bytes, Platform.BYTE_ARRAY_OFFSET);
    return bytes;
  }

  /** The row {@code length} bytes from {@code offset} of {@code bytes} hold. */
  Row decode(byte[] bytes, int offset, int length) {
    UnsafeRow unsafe = new UnsafeRow(fields);
    unsafe.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + offset, length);
    return deserializer.apply(unsafe);
  }

  Row decode(byte[] bytes) {
    return decode(bytes, 0, bytes.length);
  }
}
