package io.github.fkjoin.engine;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.UUID;
import java.util.stream.Stream;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.IndexType;
import org.rocksdb.LRUCache;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;

/**
 * The memory and local disk every join state of this JVM shares: one RocksDB block cache and one write
 * buffer manager charged to it, so that all the states together hold at most {@link #budget()} bytes of
 * native memory (index and filter blocks included), and spill the rest to local disk. This is how
 * Spark's own RocksDB state store bounds an executor ({@code RocksDBMemoryManager}): the cache's limit is
 * not strict (a strict one makes writes fail when pinned blocks fill it, SPARK-44878), so lookups stay
 * change-sized.
 *
 * <p>The budget is {@code spark.fkjoin.state.memoryBytes} when a request gives it, else an eighth of the
 * JVM's maximum heap, at least 64 MiB and at most 1 GiB: 512 MiB in a 4 GiB driver; the first state
 * the JVM opens fixes it. The states live under
 * {@code <java.io.tmpdir>/fkjoin-state/<jvm>/}, beside a {@code <jvm>.lock} file this JVM locks for its
 * life; a later JVM deletes the directories whose lock no one holds (a killed JVM's), so disk never
 * fills with orphans.
 *
 * <p>A part of {@link WarmJoinState}, with no Python module of its own: Python reaches it through the
 * {@code warm_*} actions.
 */
final class StateMemory {
  static final long MIN_BUDGET = 64L << 20;
  static final long MAX_BUDGET = 1L << 30;
  /**
   * Free space a build keeps on the state's disk unless {@code spark.fkjoin.state.diskReserveBytes} says
   * otherwise: below it, the build stops with a reason.
   */
  static final long DISK_RESERVE = 512L << 20;

  private static LRUCache cache;
  private static WriteBufferManager writeBuffers;
  private static long budget;
  private static Path jvmDir;
  private static FileLock jvmLock;

  private StateMemory() {}

  /** The budget a JVM with {@code maxHeap} bytes of heap gives its states when none is set. */
  static long defaultBudget(long maxHeap) {
    return Math.max(MIN_BUDGET, Math.min(MAX_BUDGET, maxHeap / 8));
  }

  /** The native memory all states may use together (bytes). */
  static synchronized long budget() {
    return budget;
  }

  /**
   * Load RocksDB's native library and size the shared cache: {@code requested} bytes, or the JVM's
   * default when not positive. The first state a JVM opens fixes the budget until the JVM ends. Loading runs on a thread of its own that no interrupt reaches: an
   * interrupted load leaves the library unusable for the JVM's life (SPARK-39847).
   */
  static synchronized void open(long requested) {
    long wanted = requested > 0 ? requested : defaultBudget(Runtime.getRuntime().maxMemory());
    if (cache == null) {
      loadLibrary();
      budget = wanted;
      cache = new LRUCache(budget, -1, false, 0.1);
      writeBuffers = new WriteBufferManager(budget / 4, cache, false);
    }
  }

  private static void loadLibrary() {
    Throwable[] failed = new Throwable[1];
    Thread loader =
        new Thread(
            () -> {
              try {
                RocksDB.loadLibrary();
              } catch (Throwable error) {
                failed[0] = error;
              }
            },
            "fkjoin-rocksdb-load");
    loader.setDaemon(true);
    loader.start();
    boolean interrupted = false;
    while (loader.isAlive()) {
      try {
        loader.join();
      } catch (InterruptedException error) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
    if (failed[0] != null) {
      throw new IllegalStateException("RocksDB's native library could not be loaded: " + failed[0], failed[0]);
    }
  }

  /** Options for one state's database: the shared write buffers, few open files, no write-ahead log. */
  static DBOptions dbOptions() {
    return new DBOptions()
        .setCreateIfMissing(true)
        .setCreateMissingColumnFamilies(true)
        .setWriteBufferManager(writeBuffers)
        .setMaxOpenFiles(256)
        .setMaxBackgroundJobs(2)
        .setKeepLogFileNum(1)
        .setInfoLogLevel(org.rocksdb.InfoLogLevel.WARN_LEVEL);
  }

  /**
   * Options for one column family: blocks in the shared cache with their index and filter blocks
   * (high priority, the top level pinned), a whole-key Bloom filter so that a lookup of an absent key
   * reads no data block, LZ4 compression and small memtables.
   */
  static ColumnFamilyOptions columnOptions() {
    BlockBasedTableConfig table =
        new BlockBasedTableConfig()
            .setBlockCache(cache)
            .setBlockSize(16 * 1024)
            .setCacheIndexAndFilterBlocks(true)
            .setCacheIndexAndFilterBlocksWithHighPriority(true)
            .setPinTopLevelIndexAndFilter(true)
            .setIndexType(IndexType.kTwoLevelIndexSearch)
            .setPartitionFilters(true)
            .setFilterPolicy(new BloomFilter(10));
    return new ColumnFamilyOptions()
        .setTableFormatConfig(table)
        .setCompressionType(CompressionType.LZ4_COMPRESSION)
        .setWriteBufferSize(8L << 20)
        .setMaxWriteBufferNumber(2);
  }

  /**
   * A new, empty directory for one state under this JVM's own (locked) directory; the first call also
   * deletes the directories of JVMs that are gone.
   */
  static synchronized Path newStateDir() throws IOException {
    if (jvmDir == null) {
      Path root = Path.of(System.getProperty("java.io.tmpdir"), "fkjoin-state");
      Files.createDirectories(root);
      sweepOrphans(root);
      String name = UUID.randomUUID().toString();
      // the lock is held before the directory exists: a sweeping JVM never sees the directory unlocked
      FileChannel channel = new RandomAccessFile(root.resolve(name + ".lock").toFile(), "rw").getChannel();
      jvmLock = channel.lock();
      Path dir = root.resolve(name);
      Files.createDirectories(dir);
      jvmDir = dir;
      Path lockFile = root.resolve(name + ".lock");
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    delete(dir);
                    lockFile.toFile().delete();
                  },
                  "fkjoin-state-cleanup"));
    }
    Path state = jvmDir.resolve(UUID.randomUUID().toString());
    Files.createDirectories(state);
    return state;
  }

  /** Delete the directories of JVMs that are gone: each JVM's {@code <id>.lock} is locked while it lives. */
  private static void sweepOrphans(Path root) throws IOException {
    try (Stream<Path> entries = Files.list(root)) {
      for (Path entry : (Iterable<Path>) entries::iterator) {
        String name = entry.getFileName().toString();
        if (!name.endsWith(".lock")) {
          continue;
        }
        File lock = entry.toFile();
        try (FileChannel channel = new RandomAccessFile(lock, "rw").getChannel()) {
          FileLock held = channel.tryLock();
          if (held == null) {
            continue;
          }
          delete(root.resolve(name.substring(0, name.length() - ".lock".length())));
          lock.delete();
          held.release();
        } catch (OverlappingFileLockException | IOException error) {
          // another JVM holds it, or it went away meanwhile
        }
      }
    }
  }

  /** Delete {@code dir} and everything under it, quietly: a state's files are a cache of its inputs. */
  static void delete(Path dir) {
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
    } catch (IOException error) {
      // a file another process removed first
    }
  }

  /** Why a build must stop for lack of disk under {@code dir} (keeping {@code reserve} bytes free), or null. */
  static String diskShort(Path dir, long reserve) {
    long free = dir.toFile().getUsableSpace();
    if (free < reserve) {
      return "the join state's disk (" + dir.getParent() + ") has " + (free >> 20) + " MiB free, under the "
          + (reserve >> 20) + " MiB a state keeps free (spark.fkjoin.state.diskReserveBytes): point the "
          + "JVM's java.io.tmpdir at a larger disk, or turn warm_state off";
    }
    return null;
  }

  /** Native memory the shared cache holds now (blocks, index, filters and charged write buffers). */
  static synchronized long usedBytes() {
    return cache == null ? 0 : cache.getUsage();
  }
}
