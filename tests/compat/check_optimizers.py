"""Tessera's optimizers against Keras's own (keras.optimizers, the Keras 3 that tensorflow-cpu
installs), on the same gradients: for every kind and the options that choose another formula
(momentum, nesterov, amsgrad, centered, Ftrl's powers and regularization), weight decay and the
three clippings, 10 updates of a [6, 5] variable from the same start, Keras's applied with
optimizer.apply, Tessera's by tests/compat/optimizer_steps.c (the kernels the PS and the engine
run). After every step the values agree within 1e-5 relative (absolute below 1).

Then each newer optimizer, with weight decay or clipping, trains the Fashion-MNIST MLP for 300
steps with `tessera train`; `tessera export` writes model.keras, and keras.saving.load_model
loads it without a warning, with the optimizer's class, its options and its variables (the
slots Tessera kept, Nadam's u_product) in place, and evaluates the test split to Tessera's
accuracy.

Row updates (an Embedding's gradient, as the PS applies it) get the same gradients as rows in a
shuffled order with one row twice (its two halves summed), which makes the dense gradient Keras
is given: the results agree the same way. Tessera's row updates are lazy (rows no step touches
keep their slots), so every step here touches every row."""
import os
import re
import subprocess
import tempfile
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402

from compat import (BUILD, SOURCE, check, fashion_test, finish, tessera,  # noqa: E402
                    test_accuracy)

STEPS, ROWS, ROW_LEN = 10, 6, 5
N = ROWS * ROW_LEN

# (Keras class, Tessera's name, options: the same keys in both)
CASES = [
    ("SGD", "sgd", {"learning_rate": 0.05}),
    ("SGD", "sgd", {"learning_rate": 0.05, "momentum": 0.9}),
    ("SGD", "sgd", {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True}),
    ("Adam", "adam", {"learning_rate": 0.01}),
    ("Adam", "adam", {"learning_rate": 0.01, "amsgrad": True}),
    ("Adagrad", "adagrad", {"learning_rate": 0.05}),
    ("RMSprop", "rmsprop", {"learning_rate": 0.01}),
    ("RMSprop", "rmsprop", {"learning_rate": 0.01, "momentum": 0.5, "centered": True}),
    ("AdamW", "adamw", {"learning_rate": 0.01}),
    ("AdamW", "adamw", {"learning_rate": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    ("Nadam", "nadam", {"learning_rate": 0.01}),
    ("Nadam", "nadam", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99}),
    ("Adamax", "adamax", {"learning_rate": 0.01}),
    ("Lion", "lion", {"learning_rate": 0.001}),
    ("Lion", "lion", {"learning_rate": 0.001, "beta_1": 0.5, "beta_2": 0.9}),
    ("Ftrl", "ftrl", {"learning_rate": 0.1}),
    ("Ftrl", "ftrl", {"learning_rate": 0.1, "learning_rate_power": -0.3,
                      "initial_accumulator_value": 0.5, "l1_regularization_strength": 0.01,
                      "l2_regularization_strength": 0.02,
                      "l2_shrinkage_regularization_strength": 0.03, "beta": 0.1}),
    ("Ftrl", "ftrl", {"learning_rate": 0.1, "learning_rate_power": 0.0}),
    ("SGD", "sgd", {"learning_rate": 0.05, "weight_decay": 0.5}),
    ("Adam", "adam", {"learning_rate": 0.01, "weight_decay": 0.2}),
    ("Adam", "adam", {"learning_rate": 0.01, "clipnorm": 0.5}),
    ("SGD", "sgd", {"learning_rate": 0.05, "momentum": 0.9, "global_clipnorm": 0.5}),
    ("RMSprop", "rmsprop", {"learning_rate": 0.01, "clipvalue": 0.1}),
]

# The weight constraints Keras applies after each update (kernel_constraint ...), on the same
# [6, 5] variable with SGD: (Keras's constraint, Tessera's options)
CONSTRAINTS = [
    (lambda: keras.constraints.NonNeg(), ["constraint=non_neg"]),
    (lambda: keras.constraints.MaxNorm(1.5, axis=0),
     ["constraint=max_norm", "constraint_max=1.5", "constraint_axis=0"]),
    (lambda: keras.constraints.MaxNorm(1.0, axis=1),
     ["constraint=max_norm", "constraint_max=1.0", "constraint_axis=1"]),
    (lambda: keras.constraints.UnitNorm(axis=0), ["constraint=unit_norm", "constraint_axis=0"]),
    (lambda: keras.constraints.MinMaxNorm(0.5, 1.2, rate=0.7, axis=1),
     ["constraint=min_max_norm", "constraint_min=0.5", "constraint_max=1.2",
      "constraint_rate=0.7", "constraint_axis=1"]),
]


def keras_steps(cls, options, params, grads, constraint=None):
    """The variable after each of Keras's updates, [STEPS, N]."""
    var = keras.Variable(params.reshape(ROWS, ROW_LEN), dtype="float32")
    var.constraint = constraint  # what add_weight(constraint=) sets; apply() applies it
    opt = getattr(keras.optimizers, cls)(**options)
    out = []
    for g in grads:
        opt.apply([keras.ops.convert_to_tensor(g.reshape(ROWS, ROW_LEN))], [var])
        out.append(np.array(var.numpy()).reshape(-1))
    return np.stack(out)


def tessera_steps(name, options, params, grads, rows, extra=()):
    """Tessera's values after each update, [STEPS, N]; rows: feed the gradients as rows."""
    with tempfile.TemporaryDirectory() as d:
        params.astype("<f4").tofile(os.path.join(d, "params.f32"))
        args = [os.path.join(BUILD, "tests", "optimizer_steps"), d, name, str(STEPS), str(N)]
        if rows:
            # each step: every row once, shuffled, and row 2 split into two halves
            rng = np.random.default_rng(7)
            idx, vals = [], []
            for g in grads.reshape(STEPS, ROWS, ROW_LEN):
                order = list(rng.permutation(ROWS)) + [2]
                v = np.stack([g[r] for r in order])
                v[order.index(2)] *= 0.25
                v[-1] = g[2] * 0.75
                idx.append(order)
                vals.append(v)
            np.asarray(idx, dtype="<i8").tofile(os.path.join(d, "indices.i64"))
            np.asarray(vals, dtype="<f4").tofile(os.path.join(d, "grads.f32"))
            args += [str(ROW_LEN), str(ROWS + 1)]
        else:
            grads.astype("<f4").tofile(os.path.join(d, "grads.f32"))
        for k, v in options.items():
            args.append("%s=%s" % (k, str(v).lower() if isinstance(v, bool) else repr(v)))
        args.extend(extra)
        out = subprocess.run(args, capture_output=True, text=True)
        check(out.returncode == 0, "%s: %s" % (" ".join(args[2:]), out.stderr))
        if out.returncode != 0:
            return None
        return np.fromfile(os.path.join(d, "out.f32"), dtype="<f4").reshape(STEPS, N)


# (job file optimizer, Keras class, what its config must say)
EXPORTS = [
    ("{adamw: {learning_rate: 0.001, weight_decay: 0.01, clipnorm: 1.0}}", "AdamW",
     {"weight_decay": 0.01, "clipnorm": 1.0}),
    ("{nadam: {learning_rate: 0.001, global_clipnorm: 5.0}}", "Nadam", {"global_clipnorm": 5.0}),
    ("{adamax: {learning_rate: 0.002, clipvalue: 0.5}}", "Adamax", {"clipvalue": 0.5}),
    ("{lion: {learning_rate: 0.0001, weight_decay: 0.1}}", "Lion", {"weight_decay": 0.1}),
    ("{ftrl: {learning_rate: 0.1, l2_regularization_strength: 0.001}}", "Ftrl",
     {"l2_regularization_strength": 0.001}),
]


def exports():
    """Each newer optimizer through tessera train and export into Keras."""
    x, y = fashion_test()
    with open(os.path.join(SOURCE, "examples", "fashion-mnist-mlp.yaml")) as f:
        base = f.read().replace("train: {epochs: 5}", "train: {steps: 300}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (spec, cls, config) in enumerate(EXPORTS):
            job = os.path.join(tmp, "job-%d.yaml" % n)
            with open(job, "w") as f:
                f.write(re.sub(r"optimizer: .*", "optimizer: " + spec, base) +
                        "\ncheckpoint: {dir: ckpt-%d}\n" % n)
            ours = test_accuracy(tessera("train", job, cwd=tmp))
            tessera("export", job, "--out", os.path.join(tmp, "export-%d" % n), cwd=tmp)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = keras.saving.load_model(os.path.join(tmp, "export-%d" % n, "model.keras"))
            opt = model.optimizer
            got = opt.get_config()
            theirs = model.evaluate(x, y, verbose=0, return_dict=True, batch_size=256)["accuracy"]
            print("%s: tessera %.4f, keras %.4f, %d optimizer variables, iteration %d" % (
                cls, ours, theirs, len(opt.variables), int(opt.iterations.numpy())))
            check(not caught, "%s: Keras warned on load: %s" % (
                cls, "; ".join(str(w.message)[:200] for w in caught)))
            check(type(opt).__name__ == cls, "%s: Keras built %s" % (cls, type(opt).__name__))
            for key, want in config.items():
                check(got.get(key) is not None and abs(got[key] - want) < 1e-9,
                      "%s: config %s is %s, not %s" % (cls, key, got.get(key), want))
            check(int(opt.iterations.numpy()) == 300, "%s: iterations %d" % (
                cls, int(opt.iterations.numpy())))
            slots = [v for v in opt.variables if v.path.split("/")[-1].split("_")[-1] in
                     ("momentum", "velocity", "norm", "accumulator", "linear")]
            check(len(slots) > 0 and all(np.abs(v.numpy()).max() > 0 for v in slots),
                  "%s: the slots were not loaded" % cls)
            if cls == "Nadam":
                u = [v for v in opt.variables if len(v.shape) == 0 and "iteration" not in v.path
                     and "learning_rate" not in v.path]
                want = np.prod([0.9 * (1 - 0.5 * 0.96 ** i) for i in range(1, 301)])
                check(len(u) == 1 and abs(float(u[0].numpy()) - want) <= 1e-6 * want,
                      "Nadam: u_product %s, want %g" % ([float(v.numpy()) for v in u], want))
            check(abs(theirs - ours) <= 0.001 + 1e-9,
                  "%s: Keras evaluates %.4f, Tessera %.4f" % (cls, theirs, ours))


def main():
    rng = np.random.default_rng(2026)
    worst = 0.0
    for cls, name, options in CASES:
        params = rng.normal(0, 1, N).astype(np.float32)
        grads = rng.normal(0, 1, (STEPS, N)).astype(np.float32)
        theirs = keras_steps(cls, options, params, grads)
        clips = any(k in options for k in ("clipnorm", "global_clipnorm", "clipvalue"))
        # a clip norm over rows sees the duplicate's halves, not their sum: dense only
        for rows in (False,) if clips else (False, True):
            ours = tessera_steps(name, options, params, grads, rows)
            if ours is None:
                continue
            err = np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1.0)
            step = int(np.argmax(err.max(axis=1) > 1e-5)) if err.max() > 1e-5 else -1
            worst = max(worst, float(err.max()))
            what = "%s %s%s" % (cls, options, " as rows" if rows else "")
            print("%-100s max relative difference %.2e" % (what, err.max()))
            check(err.max() <= 1e-5, "%s: step %d differs by %.2e: tessera %s, keras %s" % (
                what, step + 1, err.max(), ours[step][:4], theirs[step][:4]))
            check(np.abs(ours[-1] - params).max() > 1e-4, what + ": the values did not move")
    for make, extra in CONSTRAINTS:
        params = rng.normal(0, 1, N).astype(np.float32)
        grads = rng.normal(0, 1, (STEPS, N)).astype(np.float32)
        theirs = keras_steps("SGD", {"learning_rate": 0.05}, params, grads, make())
        ours = tessera_steps("sgd", {"learning_rate": 0.05}, params, grads, False, extra)
        if ours is None:
            continue
        err = np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1.0)
        worst = max(worst, float(err.max()))
        print("%-100s max relative difference %.2e" % ("SGD with " + " ".join(extra), err.max()))
        check(err.max() <= 1e-5, "%s: differs by %.2e" % (" ".join(extra), err.max()))
    exports()
    finish("%d optimizer configurations and %d constraints match Keras %s over %d steps "
           "(largest relative difference %.2e); %d newer optimizers export into Keras" % (
               len(CASES), len(CONSTRAINTS), keras.__version__, STEPS, worst, len(EXPORTS)))


main()
