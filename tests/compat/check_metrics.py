"""Tessera's metrics against Keras's own metric classes (keras.metrics, the Keras 3 that
tensorflow-cpu installs), on the same predictions: sparse top-k with ties, AUC for each curve and
summation method (with predictions exactly on thresholds, at 0 and at 1; of several labels, and
weighted by label_weights; at thresholds given as a list),
precision and recall (thresholds, several of them as a list, class_id, top_k with ties), and the
mean absolute, squared and root mean squared errors. Keras sees
one-hot labels where Tessera sees class ids, as Keras users of categorical losses write them.
Tessera's sums are made by tests/compat/metric_values.c (the engine's code) over uneven pieces of
the examples, added up as workers' are; every result agrees with Keras's within 1e-5 relative
(and 1e-7 absolute, for results near 0).

Then the Fashion-MNIST MLP with a softmax and one-hot labels trains 300 steps with these metrics;
`tessera export` writes them into model.keras's compile config, and Keras, loading it, evaluates
the test split to Tessera's numbers (within 0.002: two implementations' float rounding moves a
few predictions across a threshold)."""
import os
import re
import subprocess
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402

from compat import BUILD, SOURCE, check, fashion_test, finish, tessera  # noqa: E402

N, PARTS = 1000, 4
M = keras.metrics


def classes_case(rng, k):
    """Probabilities of k classes, rounded so that some tie and some sit on thresholds."""
    z = rng.normal(size=(N, k)).astype("float32") * 2
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    p[: N // 4] = np.round(p[: N // 4] * 20) / 20  # ties, and values on 1/(T-1) grids
    p[0, :] = 0.5
    p[1, 0], p[1, 1:] = 1.0, 0.0
    y = rng.integers(0, k, size=N).astype("float32")
    # better than chance: the labelled class gets more weight in half of the examples
    half = np.arange(N) % 2 == 0
    p[half, y[half].astype(int)] += 0.3
    return p.astype("float32"), y


def binary_case(rng):
    y = (rng.random(N) < 0.3).astype("float32")
    p = np.clip(0.35 * y + rng.random(N) * 0.65, 0, 1).astype("float32")
    p[:50] = np.round(p[:50] * 6) / 6
    p[50], p[51], p[52] = 0.0, 1.0, 0.5
    return p.reshape(N, 1), y


def multi_label_case(rng, k):
    """k 0/1 targets an example (a label for each output), as a sigmoid output predicts them."""
    y = (rng.random((N, k)) < 0.4).astype("float32")
    p = np.clip(0.3 * y + rng.random((N, k)) * 0.7, 0, 1).astype("float32")
    p[:40] = np.round(p[:40] * 6) / 6
    return p, y


def regression_case(rng):
    y = rng.normal(size=N).astype("float32")
    p = (y + rng.normal(size=N) * 0.5).astype("float32")
    return p.reshape(N, 1), y


def aucs():
    """Fresh metric objects: their state adds up over update_state calls."""
    return [("auc", M.AUC()),
            ("{auc: {num_thresholds: 7, name: a7}}", M.AUC(num_thresholds=7)),
            ("{auc: {curve: PR, name: pr}}", M.AUC(curve="PR")),
            ("{auc: {curve: PR, num_thresholds: 13, name: pr13}}",
             M.AUC(curve="PR", num_thresholds=13)),
            ("{auc: {curve: PR, summation_method: minoring, name: prmin}}",
             M.AUC(curve="PR", summation_method="minoring")),
            ("{auc: {summation_method: majoring, name: rocmaj}}",
             M.AUC(summation_method="majoring")),
            ("{auc: {curve: PRGAIN, name: gain}}", M.AUC(curve="PRGAIN"))]


def confusion():
    return [("precision", M.Precision()), ("recall", M.Recall()),
            ("{precision: {thresholds: 0.3, name: p3}}", M.Precision(thresholds=0.3)),
            ("{recall: {thresholds: 0.7, name: r7}}", M.Recall(thresholds=0.7))]


def cases(rng):
    """(title, outputs, predictions, labels, [(Tessera's metric entry, Keras metric)])"""
    k = 10
    p, y = classes_case(rng, k)
    yield ("10 classes", k, p, y,
           [("sparse_top_k_categorical_accuracy", M.SparseTopKCategoricalAccuracy()),
            ("{sparse_top_k_categorical_accuracy: {k: 1, name: top1}}",
             M.SparseTopKCategoricalAccuracy(k=1)),
            ("{sparse_top_k_categorical_accuracy: {k: 3, name: top3}}",
             M.SparseTopKCategoricalAccuracy(k=3))] + aucs() + confusion() +
           [("{precision: {class_id: 2, name: p_c2}}", M.Precision(class_id=2)),
            ("{recall: {class_id: 7, thresholds: 0.2, name: r_c7}}",
             M.Recall(class_id=7, thresholds=0.2))])
    yield ("10 classes", k, p, y,  # at most 16 metrics a job
           [("{precision: {top_k: 2, name: p_top2}}", M.Precision(top_k=2)),
            ("{recall: {top_k: 3, name: r_top3}}", M.Recall(top_k=3)),
            ("{precision: {top_k: 1, class_id: 4, thresholds: 0.2, name: p_t1c4}}",
             M.Precision(top_k=1, class_id=4, thresholds=0.2)),
            ("{precision: {class_id: 2, thresholds: [0.3, 0.05], name: p_c2_list}}",
             M.Precision(class_id=2, thresholds=[0.3, 0.05])),
            ("{recall: {top_k: 2, thresholds: [0.1, 0.25, 0.4], name: r_top2_list}}",
             M.Recall(top_k=2, thresholds=[0.1, 0.25, 0.4]))])
    p, y = binary_case(rng)
    yield ("binary", 1, p, y, aucs() + confusion() + [
        ("mae", M.MeanAbsoluteError()), ("mse", M.MeanSquaredError()),
        # thresholds as a list, unsorted, one of them on predictions (0.5)
        ("{auc: {thresholds: [0.1, 0.5, 0.9, 0.3], name: a_list}}",
         M.AUC(thresholds=[0.1, 0.5, 0.9, 0.3])),
        ("{auc: {curve: PR, thresholds: [0.2, 0.4, 0.6, 0.8, 0.95], name: pr_list}}",
         M.AUC(curve="PR", thresholds=[0.2, 0.4, 0.6, 0.8, 0.95]))])
    # precision and recall at several thresholds: Keras's vector, Tessera's metric each
    yield ("binary", 1, p, y, [
        ("{precision: {thresholds: [0.7, 0.2, 0.5], name: p_list}}",
         M.Precision(thresholds=[0.7, 0.2, 0.5])),
        ("{recall: {thresholds: [0.1, 0.9], name: r_list}}", M.Recall(thresholds=[0.1, 0.9])),
        ("{recall: {thresholds: [0.4]}}", M.Recall(thresholds=[0.4]))])
    p, y = multi_label_case(rng, 4)
    yield ("4 targets", 4, p, y, aucs() + confusion() + [
        ("{precision: {class_id: 1, name: p_c1}}", M.Precision(class_id=1)),
        ("mae", M.MeanAbsoluteError()), ("rmse", M.RootMeanSquaredError())])
    yield ("4 targets", 4, p, y, [
        ("{recall: {top_k: 2, name: r_top2}}", M.Recall(top_k=2)),
        ("{auc: {multi_label: true, num_labels: 4, name: ml}}",
         M.AUC(multi_label=True, num_labels=4)),
        ("{auc: {multi_label: true, name: ml_dense}}", M.AUC(multi_label=True)),
        ("{auc: {multi_label: true, num_labels: 4, curve: PR, num_thresholds: 9, name: ml_pr}}",
         M.AUC(multi_label=True, num_labels=4, curve="PR", num_thresholds=9)),
        # label_weights: the labels' curves weighted in their mean, or each label's counts
        # weighted in the one curve
        ("{auc: {multi_label: true, label_weights: [1, 0.5, 0, 2], name: ml_w}}",
         M.AUC(multi_label=True, label_weights=[1, 0.5, 0, 2])),
        ("{auc: {label_weights: [1, 0.5, 0.25, 2], name: auc_w}}",
         M.AUC(label_weights=[1, 0.5, 0.25, 2])),
        ("{auc: {curve: PR, label_weights: [0, 3, 1, 1], name: pr_w}}",
         M.AUC(curve="PR", label_weights=[0, 3, 1, 1])),
        ("{auc: {multi_label: true, thresholds: [0.5, 0.25, 0.75], name: ml_list}}",
         M.AUC(multi_label=True, thresholds=[0.5, 0.25, 0.75]))])
    p, y = classes_case(rng, 6)
    y = keras.utils.to_categorical(y, 6).astype("float32")  # one-hot rows, as the data gives
    yield ("one-hot", 6, p, y, [("top_k_categorical_accuracy", M.TopKCategoricalAccuracy()),
                                ("{top_k_categorical_accuracy: {k: 2, name: top2}}",
                                 M.TopKCategoricalAccuracy(k=2))] + aucs() + confusion() +
           [("{auc: {multi_label: true, num_labels: 6, name: ml}}",
             M.AUC(multi_label=True, num_labels=6))])
    p, y = regression_case(rng)
    yield ("regression", 1, p, y, [("mae", M.MeanAbsoluteError()),
                                   ("rmse", M.RootMeanSquaredError()),
                                   ("mean_squared_error", M.MeanSquaredError())])


def keras_results(outputs, p, y, metrics):
    """(entry, Keras's value) of each metric, a pair for each value of a vector (precision or
    recall at several thresholds)."""
    out = []
    for entry, m in metrics:
        if y.ndim == 2:  # a label for each output
            m.update_state(y, p)
        elif outputs > 1 and not isinstance(m, M.SparseTopKCategoricalAccuracy):
            m.update_state(keras.utils.to_categorical(y, outputs), p)
        elif outputs > 1:
            m.update_state(y, p)
        else:
            m.update_state(y.reshape(-1, 1), p)
        out.extend((entry, float(v)) for v in np.asarray(m.result()).reshape(-1))
    return out


def main():
    rng = np.random.default_rng(7)
    tool = os.path.join(BUILD, "tests", "metric_values")
    with tempfile.TemporaryDirectory() as tmp:
        for title, outputs, p, y, metrics in cases(rng):
            job = os.path.join(tmp, "job.yaml")
            with open(job, "w") as f:
                f.write("model: [{dense: {units: %d}, input_shape: [4]}]\n" % outputs)
                f.write("loss: %s\n" % ("mse" if outputs == 1 or y.ndim == 2 else
                                        "sparse_categorical_crossentropy"))
                f.write("metrics: [%s]\n" % ", ".join(entry for entry, _ in metrics))
                f.write("data: {batch_size: 8, train: {format: synthetic, examples: 10, "
                        "shape: [4], classes: 2}}\n")
            p.astype("<f4").tofile(os.path.join(tmp, "pred.f32"))
            y.astype("<f4").tofile(os.path.join(tmp, "y.f32"))
            out = subprocess.run([tool, job, str(outputs), str(PARTS),
                                  os.path.join(tmp, "pred.f32"), os.path.join(tmp, "y.f32")],
                                 capture_output=True, text=True)
            check(out.returncode == 0, "%s: metric_values: %s%s" % (title, out.stdout, out.stderr))
            if out.returncode != 0:
                continue
            ours = [line.split() for line in out.stdout.splitlines()]
            theirs = keras_results(outputs, p, y, metrics)
            check(len(ours) == len(theirs), "%s: %d results, Keras %d" %
                  (title, len(ours), len(theirs)))
            for (name, value), (entry, want) in zip(ours, theirs):
                got = float(value)
                ok = abs(got - want) <= 1e-5 * abs(want) + 1e-7
                check(ok, "%s: %s (%s) is %.8g, Keras's %.8g" % (title, name, entry, got, want))
                print("%-10s %-34s tessera %.7f  keras %.7f" % (title, name, got, want))
        exported_metrics(tmp)
    finish("every metric matches Keras's")


EXPORT_METRICS = ("[accuracy, auc, {auc: {curve: PR, name: pr_auc}}, precision, "
                  "{recall: {class_id: 3}}, {sparse_top_k_categorical_accuracy: {k: 2}}, "
                  "{precision: {top_k: 2, name: p_top2}}, "
                  "{auc: {multi_label: true, num_labels: 10, name: ml_auc}}, "
                  "{auc: {multi_label: true, label_weights: [1, 2, 1, 0, 1, 1, 1, 3, 1, 1], "
                  "name: ml_auc_w}}, {auc: {thresholds: [0.25, 0.5, 0.75], name: auc_list}}, "
                  "{precision: {thresholds: [0.3, 0.6], name: p_list}}]")


def exported_metrics(tmp):
    with open(os.path.join(SOURCE, "examples", "fashion-mnist-mlp.yaml")) as f:
        text = f.read()
    text = text.replace("{dense: {units: 10}}", "{dense: {units: 10, activation: softmax}}")
    text = re.sub(r"(?m)^loss: .*$", "loss: categorical_crossentropy", text)
    text = re.sub(r"(?m)^metrics: .*$", "metrics: " + EXPORT_METRICS, text)
    job = os.path.join(tmp, "metrics.yaml")
    with open(job, "w") as f:
        f.write(text + "\ncheckpoint: {dir: ckpt-metrics}\n")
    out = tessera("train", job, "--steps", "300", cwd=tmp)
    ours = dict(re.findall(r"test ([a-z_0-9.]+) ([0-9.]+)", out.splitlines()[-1]))
    export = os.path.join(tmp, "export-metrics")
    tessera("export", job, "--out", export, cwd=tmp)
    model = keras.saving.load_model(os.path.join(export, "model.keras"))
    x, y = fashion_test()
    theirs = model.evaluate(x, keras.utils.to_categorical(y, 10), verbose=0, return_dict=True,
                            batch_size=256)
    # (the top-k metric is Keras's TopKCategoricalAccuracy of the one-hot labels, under its name)
    for name in ["accuracy", "auc", "pr_auc", "precision", "recall",
                 "sparse_top_k_categorical_accuracy", "p_top2", "ml_auc", "ml_auc_w", "auc_list",
                 "p_list_0.3", "p_list_0.6"]:
        ours_name = keras_name = name
        if name.startswith("p_list_"):  # Keras's one metric of two values
            keras_name = "p_list"
            if keras_name in theirs:
                theirs[name] = float(np.asarray(theirs[keras_name]).reshape(-1)[
                    0 if name.endswith("0.3") else 1])
            keras_name = name
        check(ours_name in ours and keras_name in theirs,
              "export: %s missing (Tessera %s, Keras %s)" % (name, ours, theirs))
        if ours_name in ours and keras_name in theirs:
            print("export     %-34s tessera %.4f  keras %.4f" % (name, float(ours[ours_name]),
                                                                  theirs[keras_name]))
            check(abs(float(ours[ours_name]) - theirs[keras_name]) <= 0.002,
                  "export: Keras evaluates %s to %.4f, Tessera %s" %
                  (name, theirs[keras_name], ours[ours_name]))


main()
