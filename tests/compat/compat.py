"""What the compat checks (check_*.py) share: the build under test, Fashion-MNIST as NumPy
arrays, running the tessera command, and the tally of failed checks that decides the exit
status."""
import gzip
import os
import re
import subprocess
import sys

BUILD = os.environ["TESSERA_BUILD_DIR"]
SOURCE = os.environ["TESSERA_SOURCE_DIR"]
FM = "/usr/share/datasets/fashion-mnist/"

failures = []


def check(cond, what):
    """Records a failed check (the run goes on, to report every one)."""
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def fashion(name, offset):
    """The bytes of a Fashion-MNIST IDX file after its header, as a uint8 array."""
    import numpy as np
    with gzip.open(FM + name, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def tessera(*args, cwd=None):
    """Runs the tessera command; a non-zero exit is a failed check. Returns its stdout."""
    out = subprocess.run([os.path.join(BUILD, "tessera"), *args], capture_output=True, text=True,
                         cwd=cwd)
    check(out.returncode == 0, "tessera %s: %s%s" % (args[0], out.stdout, out.stderr))
    return out.stdout


def result(out):
    """The part of tessera train's result line that timing does not change ("loss ..."), or
    the whole output when there is none."""
    m = re.search(r"examples/s\); (loss .*)", out)
    return m.group(1) if m else out


def test_accuracy(out):
    """The test accuracy a tessera command printed last, or -1."""
    found = re.findall(r"test accuracy ([0-9.]+)", out)
    return float(found[-1]) if found else -1.0


def fashion_test():
    """Fashion-MNIST's test split as the MLP examples read it: [10000, 784] floats in [0, 1] and
    the labels."""
    x = fashion("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype("float32") / 255
    return x, fashion("t10k-labels-idx1-ubyte.gz", 8)


def finish(message):
    """Exits 1 after the failed checks, or prints message and exits 0."""
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    print(message)
    sys.exit(0)
