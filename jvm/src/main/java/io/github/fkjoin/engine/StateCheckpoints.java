package io.github.fkjoin.engine;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Predicate;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A join state's durable copies, beside the output they describe, so that a new JVM (a restarted Spark
 * Connect server, a spark-submit task) loads the state instead of building it from the inputs.
 *
 * <p>Layout, under {@code <output>/_fkjoin/state/<state id>/} (a directory whose name starts with an
 * underscore: Delta's VACUUM leaves it alone, and the engine collects it):
 *
 * <ul>
 *   <li>{@code sst/<writer>-<name>.sst}: RocksDB's table files, immutable, uploaded once and shared by
 *       every checkpoint that lists them. {@code <writer>} names the JVM that wrote the file: two JVMs
 *       that loaded the same checkpoint number their new files alike, and must not overwrite each
 *       other's;
 *   <li>{@code c<n>/}: checkpoint n's small files (RocksDB's {@code MANIFEST}, {@code CURRENT}, {@code
 *       OPTIONS});
 *   <li>{@code c<n>.json}: checkpoint n's manifest, written last: the table files it needs and what the
 *       state holds (the output's id and version, each input's id and version, schemas and counts). A
 *       checkpoint without its manifest does not exist.
 * </ul>
 *
 * <p>A manifest names the output version whose rows the state describes; the refresh that loads it checks
 * that version and the inputs' against its own, as it checks a state held in memory, and follows the
 * output's later commits that changed no rows. The two newest checkpoints of a state are kept; a state
 * whose newest checkpoint is older than another state's of the same output is deleted.
 *
 * <p>A part of {@link WarmJoinState}, with no Python module of its own: Python reaches it through the
 * {@code warm_*} actions.
 */
final class StateCheckpoints {
  static final String DIR = "_fkjoin/state";
  /** Names this JVM's uploads. */
  static final String WRITER = java.util.UUID.randomUUID().toString().substring(0, 8);
  private static final ObjectMapper JSON = new ObjectMapper();

  private StateCheckpoints() {}

  static Path stateRoot(String output, String stateId) {
    return new Path(new Path(output, DIR), stateId);
  }

  /**
   * Upload the local checkpoint {@code local} as checkpoint {@code manifest.checkpoint} of its state:
   * the table files not in {@code uploaded} (local name to uploaded name, which it extends), the small
   * files, then the manifest; then collect what no kept checkpoint needs. Returns the bytes uploaded.
   */
  static long save(
      Configuration conf, String output, File local, ObjectNode manifest, Map<String, String> uploaded)
      throws IOException {
    String stateId = manifest.path("state_id").asText();
    long number = manifest.path("checkpoint").asLong();
    Path root = stateRoot(output, stateId);
    FileSystem fs = root.getFileSystem(conf);
    ArrayNode tables = manifest.putArray("sst");
    ArrayNode small = manifest.putArray("files");
    long bytes = 0;
    File[] files = local.listFiles();
    if (files == null) {
      throw new IOException("the state's checkpoint " + local + " is gone");
    }
    for (File file : files) {
      String name = file.getName();
      if (name.endsWith(".sst")) {
        String remote = uploaded.get(name);
        if (remote == null) {
          remote = WRITER + "-" + name;
          upload(fs, file, new Path(root, "sst/" + remote));
          uploaded.put(name, remote);
          bytes += file.length();
        }
        tables.addObject().put("name", name).put("remote", remote);
      } else {
        small.add(name);
        upload(fs, file, new Path(root, "c" + number + "/" + name));
        bytes += file.length();
      }
    }
    Path written = new Path(root, "c" + number + ".json.tmp");
    try (OutputStream out = fs.create(written, true)) {
      out.write(JSON.writeValueAsBytes(manifest));
    }
    Path named = new Path(root, "c" + number + ".json");
    if (!fs.rename(written, named)) {
      throw new IOException("could not write the state's manifest " + named);
    }
    collect(fs, output, stateId, number, manifest.path("output_version").asLong(), uploaded);
    return bytes;
  }

  /**
   * Delete this state's checkpoints older than the two newest (and the table files only they needed),
   * and every other state of the output whose newest checkpoint describes an older output version.
   */
  private static void collect(
      FileSystem fs, String output, String stateId, long newest, long outputVersion, Map<String, String> uploaded)
      throws IOException {
    Path root = stateRoot(output, stateId);
    Set<String> needed = new HashSet<>();
    for (FileStatus status : fs.listStatus(root)) {
      String name = status.getPath().getName();
      if (!name.matches("c\\d+\\.json")) {
        continue;
      }
      long number = Long.parseLong(name.substring(1, name.length() - 5));
      if (number < newest - 1) {
        fs.delete(status.getPath(), false);
        fs.delete(new Path(root, "c" + number), true);
      } else {
        for (JsonNode table : read(fs, status.getPath()).path("sst")) {
          needed.add(table.path("remote").asText());
        }
      }
    }
    Path tables = new Path(root, "sst");
    if (fs.exists(tables)) {
      for (FileStatus status : fs.listStatus(tables)) {
        String remote = status.getPath().getName();
        if (!needed.contains(remote) && uploaded.containsValue(remote)) {
          fs.delete(status.getPath(), false);
          uploaded.values().remove(remote);
        }
      }
    }
    for (FileStatus other : fs.listStatus(new Path(output, DIR))) {
      if (other.isDirectory() && !other.getPath().getName().equals(stateId)) {
        JsonNode newestOther = newest(fs, other.getPath(), manifest -> true);
        if (newestOther == null || newestOther.path("output_version").asLong() < outputVersion) {
          fs.delete(other.getPath(), true);
        }
      }
    }
  }

  /** The newest manifest of the output's states that {@code usable} accepts, or null. */
  static JsonNode find(Configuration conf, String output, Predicate<JsonNode> usable) throws IOException {
    Path dir = new Path(output, DIR);
    FileSystem fs = dir.getFileSystem(conf);
    if (!fs.exists(dir)) {
      return null;
    }
    JsonNode best = null;
    for (FileStatus state : fs.listStatus(dir)) {
      if (!state.isDirectory()) {
        continue;
      }
      JsonNode found = newest(fs, state.getPath(), usable);
      if (found != null
          && (best == null
              || found.path("output_version").asLong() > best.path("output_version").asLong())) {
        best = found;
      }
    }
    return best;
  }

  private static JsonNode newest(FileSystem fs, Path root, Predicate<JsonNode> usable) throws IOException {
    JsonNode best = null;
    if (!fs.exists(root)) {
      return null;
    }
    for (FileStatus status : fs.listStatus(root)) {
      if (!status.getPath().getName().matches("c\\d+\\.json")) {
        continue;
      }
      JsonNode manifest;
      try {
        manifest = read(fs, status.getPath());
      } catch (IOException error) {
        continue;
      }
      if (usable.test(manifest)
          && (best == null || manifest.path("checkpoint").asLong() > best.path("checkpoint").asLong())) {
        best = manifest;
      }
    }
    return best;
  }

  /** Copy the files of checkpoint {@code manifest} into the empty local directory {@code local}. */
  static long download(Configuration conf, String output, JsonNode manifest, File local) throws IOException {
    Path root = stateRoot(output, manifest.path("state_id").asText());
    FileSystem fs = root.getFileSystem(conf);
    List<Path[]> copies = new ArrayList<>();
    for (JsonNode table : manifest.path("sst")) {
      copies.add(
          new Path[] {
            new Path(root, "sst/" + table.path("remote").asText()),
            new Path(new File(local, table.path("name").asText()).getAbsolutePath())
          });
    }
    for (JsonNode file : manifest.path("files")) {
      String name = file.asText();
      copies.add(
          new Path[] {
            new Path(root, "c" + manifest.path("checkpoint").asLong() + "/" + name),
            new Path(new File(local, name).getAbsolutePath())
          });
    }
    long bytes = 0;
    for (Path[] copy : copies) {
      File target = new File(copy[1].toUri().getPath());
      try (InputStream in = fs.open(copy[0]);
          OutputStream out = new java.io.FileOutputStream(target)) {
        in.transferTo(out);
      }
      bytes += target.length();
    }
    return bytes;
  }

  /**
   * Copy a local file to {@code target} through the file system's own output stream: the plain write
   * path every store implements (S3A's {@code copyFromLocalFile} goes through a transfer manager whose
   * asynchronous HTTP client a Spark distribution may not ship).
   */
  private static void upload(FileSystem fs, File file, Path target) throws IOException {
    try (InputStream in = new java.io.FileInputStream(file);
        OutputStream out = fs.create(target, true)) {
      in.transferTo(out);
    }
  }

  private static JsonNode read(FileSystem fs, Path path) throws IOException {
    try (InputStream in = fs.open(path)) {
      return JSON.readTree(new String(in.readAllBytes(), StandardCharsets.UTF_8));
    }
  }
}
