#!/usr/bin/python3
"""Regenerates the seed corpora of tests/fuzz/corpus/ from the project's own examples, fixtures
and unit tests, so that every fuzz target starts from inputs that reach deep into its decoder.

Usage: tests/fuzz/make-corpus.py [--clean] [BUILD_DIR]   (default build-fuzz; needs python3-yaml)

Seeds are written over the files of their names; the other files of a corpus (the inputs earlier
fuzzing runs found and merged in, named by their SHA-1) stay, unless --clean empties each corpus
first.

  job        examples/*.yaml as written and as JSON, and jobs that bring a Keras file along
             (fuzz_job.c: "\\n#@file PATH\\n" before each file)
  keras      tests/fixtures/keras/*.json
  tf_config  the TF_CONFIG strings of tests/unit/common/daemon/test_cluster.c
  config     deploy/config/*.yaml and the YAML strings of tests/unit/common/daemon/test_config.c
  idx        tiny IDX files, plain and gzipped (fuzz_idx.c: "@@LABELS@@" between the two)
  rpc, error_detail   written by BUILD_DIR/tests/fuzz/fuzz_make_rpc_corpus (rpc_seeds.c)

and the libFuzzer dictionaries of tests/fuzz/dicts/: the keys and names the decoders look for,
taken from their sources, and the separators of the targets' input formats.

The regressions (tests/fuzz/regressions/) are crashes found and are never regenerated."""
import gzip
import json
import pathlib
import re
import shutil
import struct
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
DICTS = ROOT / "tests" / "fuzz" / "dicts"
FILE_SEP = b"\n#@file "
LABELS_SEP = b"@@LABELS@@"


CLEAN = "--clean" in sys.argv[1:]


def fresh(name):
    """The corpus directory of a target: emptied with --clean, else kept with what it holds."""
    d = CORPUS / name
    if CLEAN and d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    return d


def c_strings(path, call):
    """The string arguments of the calls that the regular expression `call` finds in a C file (it
    matches up to where the argument starts), when made of literals only: adjacent literals
    joined, escapes resolved."""
    text = path.read_text(encoding="utf-8")
    lit = r'"(?:[^"\\\n]|\\.)*"'
    found = []
    for m in re.finditer(r"%s\s*((?:%s\s*)+)[,)]" % (call, lit), text):
        s = "".join(p[1:-1] for p in re.findall(lit, m.group(1)))
        found.append(s.encode("utf-8").decode("unicode_escape").encode("latin-1"))
    return found


def write_all(d, items):
    for name, data in items:
        (d / name).write_bytes(data)


def job_corpus():
    d = fresh("job")
    items = []
    for ex in sorted((ROOT / "examples").glob("*.yaml")):
        text = ex.read_bytes()
        items.append(("example-" + ex.stem + ".yaml", text))
        items.append(("example-" + ex.stem + ".json",
                      json.dumps(yaml.safe_load(text), indent=1).encode()))
    keras = {
        "keras2_mlp": ([784], "sparse_categorical_crossentropy", 10),
        "keras3_cnn": ([28, 28, 1], "sparse_categorical_crossentropy", 10),
        "keras2_text": ([100], "binary_crossentropy", 2),
    }
    for stem, (shape, loss, classes) in keras.items():
        model = (ROOT / "tests" / "fixtures" / "keras" / (stem + ".json")).read_bytes()
        if loss == "binary_crossentropy":
            train = {"format": "synthetic", "kind": "text", "examples": 64, "shape": shape,
                     "vocabulary": 100, "seed": 1}
        else:
            train = {"format": "synthetic", "kind": "classification", "examples": 64,
                     "shape": shape, "classes": classes, "seed": 1}
        job = {"name": stem, "strategy": "parameter_server",
               "model": {"keras_json": stem + ".json"}, "loss": loss,
               "optimizer": {"sgd": {"learning_rate": 0.1, "momentum": 0.9}},
               "data": {"train": train, "batch_size": 16}, "train": {"steps": 5}}
        as_yaml = yaml.safe_dump(job, sort_keys=False).encode()
        items.append(("keras-" + stem + ".yaml",
                      as_yaml + FILE_SEP + b"fuzz/" + stem.encode() + b".json\n" + model))
    write_all(d, items)


def keras_corpus():
    d = fresh("keras")
    for f in sorted((ROOT / "tests" / "fixtures" / "keras").glob("*.json")):
        shutil.copyfile(f, d / f.name)


def tf_config_corpus():
    d = fresh("tf_config")
    test = ROOT / "tests" / "unit" / "common" / "daemon" / "test_cluster.c"
    strings = c_strings(test, r"\b(?:parse_ok|parse_fails_naming|cluster_spec_parse_tf_config)\(")
    write_all(d, (("test-%02d.json" % i, s) for i, s in enumerate(dict.fromkeys(strings))))


def config_corpus():
    d = fresh("config")
    for f in sorted((ROOT / "deploy" / "config").glob("*.yaml")):
        shutil.copyfile(f, d / ("deploy-" + f.name))
    test = ROOT / "tests" / "unit" / "common" / "daemon" / "test_config.c"
    strings = c_strings(test, r"\bwrite_temp\(") + c_strings(test, r"\bload_yaml\(&o, &err,")
    write_all(d, (("test-%02d.yaml" % i, s) for i, s in enumerate(dict.fromkeys(strings))))


def idx(dims, data):
    return struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", x)
                                                              for x in dims) + bytes(data)


def gz(b):
    return gzip.compress(b, mtime=0)


def idx_corpus():
    d = fresh("idx")
    images = idx([3, 2, 2], range(12))
    labels = idx([3], [0, 2, 1])
    flat = idx([4], [0, 128, 255, 7])
    flat_labels = idx([4], [1, 0, 1, 0])
    items = [
        ("plain", images + LABELS_SEP + labels),
        ("gzip", gz(images) + LABELS_SEP + gz(labels)),
        ("gzip-images", gz(images) + LABELS_SEP + labels),
        ("rank1", flat + LABELS_SEP + gz(flat_labels)),
        ("rank4", idx([2, 1, 2, 2, 1], range(8)) + LABELS_SEP + idx([2], [3, 3])),
    ]
    write_all(d, items)


def identifiers(*paths):
    """The string literals of C sources that look like keys or names."""
    found = set()
    for p in paths:
        found.update(re.findall(r'"([A-Za-z_][A-Za-z0-9_-]{1,40})"', (ROOT / p).read_text()))
    return sorted(found)


def write_dict(name, words, extra=()):
    DICTS.mkdir(exist_ok=True)
    lines = ['"%s"' % w for w in words] + list(extra)
    (DICTS / (name + ".dict")).write_text(
        "# libFuzzer dictionary, written by tests/fuzz/make-corpus.py\n" + "\n".join(lines) + "\n")


def dicts():
    keras = identifiers("common/job/keras.c", "common/job/layers.c", "common/job/keras_compile.c")
    write_dict("keras", keras)
    write_dict("job", sorted(set(identifiers("common/job/job.c", "common/job/tree.c",
                                             "common/job/metrics.c", "common/job/model.c")) |
                             set(keras)),
               ['"\\x0a#@file fuzz/"', '"keras_json: m.json"', '"@"', '"@1"'])
    write_dict("config", identifiers("common/daemon/daemon.h", "tests/fuzz/fuzz_config.c"),
               ['"true"', '"false"', '"ms"', '"250ms"', '"2m"', '"[::1]:1"', '"127.0.0.1:0"'])
    write_dict("tf_config", ["cluster", "task", "type", "index", "chief", "master", "worker",
                             "ps", "evaluator", "environment", "rpc_layer", "cloud", "grpc"])
    write_dict("idx", [], ['"@@LABELS@@"', '"\\x00\\x00\\x08\\x01"', '"\\x00\\x00\\x08\\x03"',
                           '"\\x1f\\x8b\\x08\\x00"'])


def rpc_corpora(build):
    tool = build / "tests" / "fuzz" / "fuzz_make_rpc_corpus"
    if not tool.exists():
        sys.exit("make-corpus: %s is missing: build %s first" % (tool, build))
    subprocess.run([str(tool), str(fresh("rpc")), str(fresh("error_detail"))], check=True)


def main():
    args = [a for a in sys.argv[1:] if a != "--clean"]
    build = pathlib.Path(args[0]) if args else ROOT / "build-fuzz"
    job_corpus()
    keras_corpus()
    tf_config_corpus()
    config_corpus()
    idx_corpus()
    rpc_corpora(build.resolve())
    dicts()
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print("make-corpus: %d files, %d bytes in %s" % (
        sum(1 for f in CORPUS.rglob("*") if f.is_file()), total, CORPUS))


if __name__ == "__main__":
    main()
