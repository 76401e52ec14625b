package io.github.fkjoin.engine;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.rocksdb.Checkpoint;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.ReadOptions;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.WriteBatch;
import org.rocksdb.WriteBatchWithIndex;
import org.rocksdb.WriteOptions;

/**
 * One join state's rows, in a RocksDB database of its own on local disk (bytes in, bytes out): the
 * KIP-213 stores of a foreign-key join, one column family each.
 *
 * <ul>
 *   <li>{@code left}: left key to the left row;
 *   <li>{@code sub} (the subscriptions): foreign key then left key, to nothing, so that the left keys of
 *       one foreign key are one prefix scan;
 *   <li>{@code right}: right key to the right row;
 *   <li>{@code pos}: left key to its output row's position (file index and row index in 8 bytes).
 * </ul>
 *
 * <p>Its memory is the JVM's shared cache ({@link StateMemory}); what does not fit there is read from
 * disk. Writes skip the write-ahead log: the state is rebuilt from its inputs whenever it cannot be
 * trusted, so a lost write costs a build, never a wrong row.
 *
 * <p>A part of {@link WarmJoinState}, with no Python module of its own: Python reaches it through the
 * {@code warm_*} actions.
 */
final class JoinStateStore implements AutoCloseable {
  private static final byte[] EMPTY = new byte[0];

  private final Path dir;
  private final RocksDB db;
  private final List<ColumnFamilyHandle> handles = new ArrayList<>();
  private final ColumnFamilyHandle left;
  private final ColumnFamilyHandle sub;
  private final ColumnFamilyHandle right;
  private final ColumnFamilyHandle pos;
  private final DBOptions options;
  private final ColumnFamilyOptions columns;
  private final WriteOptions writes;
  private final ReadOptions reads;
  private WriteBatchWithIndex batch;
  /** A build's writes: no reads go through it, so it needs no index. */
  private WriteBatch bulk;

  /** A new, empty state. */
  JoinStateStore(long memoryBytes) throws IOException, RocksDBException {
    this(memoryBytes, null);
  }

  /**
   * The state in {@code existing} (a checkpoint's files, copied into a directory {@link
   * StateMemory#newStateDir} gave), or a new, empty one when null.
   */
  JoinStateStore(long memoryBytes, Path existing) throws IOException, RocksDBException {
    StateMemory.open(memoryBytes);
    writes = new WriteOptions().setDisableWAL(true);
    reads = new ReadOptions();
    batch = new WriteBatchWithIndex(true);
    bulk = new WriteBatch();
    dir = existing != null ? existing : StateMemory.newStateDir();
    options = StateMemory.dbOptions();
    columns = StateMemory.columnOptions();
    List<ColumnFamilyDescriptor> families = new ArrayList<>();
    for (String name : new String[] {"default", "left", "sub", "right", "pos"}) {
      families.add(new ColumnFamilyDescriptor(name.getBytes(), columns));
    }
    db = RocksDB.open(options, dir.toString(), families, handles);
    left = handles.get(1);
    sub = handles.get(2);
    right = handles.get(3);
    pos = handles.get(4);
  }

  Path dir() {
    return dir;
  }

  byte[] left(byte[] key) throws RocksDBException {
    return batch.getFromBatchAndDB(db, left, reads, key);
  }

  byte[] right(byte[] key) throws RocksDBException {
    return batch.getFromBatchAndDB(db, right, reads, key);
  }

  /** The output row's position of a left key, or -1. */
  long position(byte[] key) throws RocksDBException {
    byte[] found = batch.getFromBatchAndDB(db, pos, reads, key);
    return found == null ? -1L : ByteBuffer.wrap(found).getLong();
  }

  /** The left keys that reference the foreign key {@code fk}: one prefix scan of the subscriptions. */
  List<byte[]> subscribers(byte[] fk) {
    byte[] prefix = subscription(fk, EMPTY);
    List<byte[]> keys = new ArrayList<>();
    try (RocksIterator it = batch.newIteratorWithBase(sub, db.newIterator(sub, reads))) {
      for (it.seek(prefix); it.isValid(); it.next()) {
        byte[] found = it.key();
        if (found.length < prefix.length
            || !Arrays.equals(found, 0, prefix.length, prefix, 0, prefix.length)) {
          break;
        }
        keys.add(Arrays.copyOfRange(found, prefix.length, found.length));
      }
    }
    return keys;
  }

  // Writes go to a batch that {@link #flush} applies atomically; reads see them before that.

  void putLeft(byte[] key, byte[] row) throws RocksDBException {
    batch.put(left, key, row);
  }

  void deleteLeft(byte[] key) throws RocksDBException {
    batch.delete(left, key);
  }

  void subscribe(byte[] fk, byte[] key) throws RocksDBException {
    batch.put(sub, subscription(fk, key), EMPTY);
  }

  void unsubscribe(byte[] fk, byte[] key) throws RocksDBException {
    batch.delete(sub, subscription(fk, key));
  }

  void putRight(byte[] key, byte[] row) throws RocksDBException {
    batch.put(right, key, row);
  }

  void deleteRight(byte[] key) throws RocksDBException {
    batch.delete(right, key);
  }

  void putPosition(byte[] key, long position) throws RocksDBException {
    batch.put(pos, key, ByteBuffer.allocate(8).putLong(position).array());
  }

  void deletePosition(byte[] key) throws RocksDBException {
    batch.delete(pos, key);
  }

  // A build's writes, blind (no read sees them before the next flush): a build trusts that each table
  // holds a key once, as the refresh that just committed made sure.

  void loadLeft(byte[] key, byte[] row, byte[] fk) throws RocksDBException {
    bulk.put(left, key, row);
    if (fk != null) {
      bulk.put(sub, subscription(fk, key), EMPTY);
    }
  }

  void loadRight(byte[] key, byte[] row) throws RocksDBException {
    bulk.put(right, key, row);
  }

  void loadPosition(byte[] key, long position) throws RocksDBException {
    bulk.put(pos, key, ByteBuffer.allocate(8).putLong(position).array());
  }

  /** Apply the writes made since the last flush, as one atomic batch. */
  void flush() throws RocksDBException {
    if (bulk.count() > 0) {
      db.write(writes, bulk);
      bulk.close();
      bulk = new WriteBatch();
    }
    if (batch.count() > 0) {
      db.write(writes, batch);
      batch.close();
      batch = new WriteBatchWithIndex(true);
    }
  }

  /** Writes waiting in the batch: a build flushes every few thousand. */
  int pending() {
    return batch.count() + bulk.count();
  }

  /** Flush the memtables to disk files (after a build, so that its memory goes back to the cache). */
  void settle() throws RocksDBException {
    flush();
    try (FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
      db.flush(flush, handles);
    }
  }

  /**
   * A consistent copy of the state's files in {@code target} (a directory that must not exist yet): hard
   * links to its immutable table files, after writing its memtables out. Pending writes are applied first.
   */
  void checkpoint(Path target) throws RocksDBException {
    flush();
    try (Checkpoint checkpoint = Checkpoint.create(db)) {
      checkpoint.createCheckpoint(target.toString());
    }
  }

  /** Bytes of the state's files on local disk. */
  long diskBytes() {
    long total = 0;
    for (ColumnFamilyHandle handle : handles) {
      try {
        total += db.getLongProperty(handle, "rocksdb.total-sst-files-size");
        total += db.getLongProperty(handle, "rocksdb.size-all-mem-tables");
      } catch (RocksDBException error) {
        // a property this build does not know: the figure is a report, not a bound
      }
    }
    return total;
  }

  /** Close the database and delete its files. */
  @Override
  public void close() {
    batch.close();
    bulk.close();
    for (ColumnFamilyHandle handle : handles) {
      handle.close();
    }
    db.close();
    writes.close();
    reads.close();
    options.close();
    columns.close();
    StateMemory.delete(dir);
  }

  private static byte[] subscription(byte[] fk, byte[] key) {
    return ByteBuffer.allocate(4 + fk.length + key.length).putInt(fk.length).put(fk).put(key).array();
  }
}
