"""Triton python-backend model that serves an ONNX model with ONNX Runtime in-process.

The embedded local tritonserver has no ONNX Runtime backend, so ``tritonkit deploy
--target local`` serves each ``onnxruntime_onnx`` model through this file (copied as
``<model>/1/model.py`` of the local repository). It keeps the production config's
inputs, outputs, batching and warm-up; a dynamic batch of requests is run as one
ONNX Runtime call, like the real backend does. A graph whose inputs or outputs (names,
dtypes) differ from the config fails its load, saying how.

It needs only numpy and onnxruntime beside the python backend's own module: a container
serves it too (``deploy --target compose --onnx-backend python``), whose Python has no
tritonkit.
"""

import functools
import json
import os

# Before ONNX Runtime's import: no record of each session under ~/.cache/Microsoft (1.29+),
# unless the server's environment says otherwise.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

# ONNX Runtime is imported by initialize, not here: Triton first imports this file in a stub
# of its own to auto-complete the config (a stub per model load), which never runs a graph.


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime as ort

        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        path = os.path.join(args["model_repository"], args["model_version"],
                            params.get("onnx_model", "model.onnx"))
        options = ort.SessionOptions()
        # ONNX Runtime's threads spin-wait between ops by default, burning CPU that the
        # server's own threads (and a load generator on the same host) need: they wait
        # without spinning.
        # The key Triton's ONNX Runtime backend reads, so a config tuned on this copy
        # (tritonkit tune) means the same in production. 0: one thread per core.
        threads = int(params.get("intra_op_thread_count", "0"))
        if threads:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(path, sess_options=options,
                                            providers=["CPUExecutionProvider"])
        # Before any request: a graph its config does not describe would fail each request
        # (the warm-up sample first) with an error that names neither of them.
        differences = _differences(config, self.session)
        if differences:
            raise ValueError(
                f"the graph {path} does not match the config of '{args['model_name']}': "
                f"{'; '.join(differences)}; write its config for this graph (tritonkit "
                f"config {args['model_name']} --force, or export it again) and redeploy")
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o["name"] for o in config.get("output", [])]
        self.batching = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        feeds = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy()
                  for name in self.inputs} for r in requests]
        results = [None] * len(requests)
        for group in self._groups(feeds):
            if len(group) == 1 or not self.batching:
                for index in group:
                    results[index] = self.session.run(self.outputs, feeds[index])
                continue
            sizes = [feeds[i][self.inputs[0]].shape[0] for i in group]
            batched = {name: np.concatenate([feeds[i][name] for i in group])
                       for name in self.inputs}
            outputs = self.session.run(self.outputs, batched)
            parts = [np.split(out, np.cumsum(sizes)[:-1]) for out in outputs]
            for slot, index in enumerate(group):
                results[index] = [part[slot] for part in parts]
        return [pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(name, np.ascontiguousarray(value))
                    for name, value in zip(self.outputs, outs)])
                for outs in results]

    def _groups(self, feeds):
        """Requests whose non-batch shapes match can run as one batch."""
        groups = {}
        for index, feed in enumerate(feeds):
            key = tuple((name, feed[name].shape[1:], feed[name].dtype.str) for name in self.inputs)
            groups.setdefault(key, []).append(index)
        return list(groups.values())


def _differences(config, session):
    """How the graph's inputs and outputs differ from the config's: names and dtypes. Every
    graph input must be configured (a request carries exactly the configured ones); a graph
    output the config leaves out is not served, as Triton's ONNX Runtime backend does."""
    found = []
    for kind, configured, graph, every in (
            ("input", config.get("input", []), session.get_inputs(), True),
            ("output", config.get("output", []), session.get_outputs(), False)):
        in_graph = {arg.name: _data_type(arg.type) for arg in graph}
        in_config = {tensor["name"]: tensor.get("data_type") for tensor in configured}
        missing = [name for name in in_config if name not in in_graph]
        extra = [name for name in in_graph if name not in in_config] if every else []
        if missing:
            found.append(f"the config's {_named(kind, missing)} not in the graph "
                         f"(its {kind}s: {_quoted(in_graph) or 'none'})")
        if extra:
            found.append(f"the graph's {_named(kind, extra)} not in the config")
        for name, data_type in in_config.items():
            if name in in_graph and in_graph[name] != data_type:
                found.append(f"{kind} '{name}' is {data_type} in the config, "
                             f"{in_graph[name]} in the graph")
    return found


def _data_type(ort_type):
    """ONNX Runtime's "tensor(float)" as a config's data type ("TYPE_FP32"); a sequence, a
    map or a type Triton lacks as ONNX Runtime names it."""
    return _config_types().get(ort_type, ort_type)


@functools.cache
def _config_types():
    """ONNX Runtime's type names, each with the config data type of the same element type:
    through the numpy type the python backend maps each config type to. Strings and
    bfloat16 have no OrtValue made from numpy: named as ONNX Runtime names them."""
    import onnxruntime as ort

    found = {"tensor(string)": "TYPE_STRING", "tensor(bfloat16)": "TYPE_BF16"}
    for config_type, np_type in pb_utils.TRITON_STRING_TO_NUMPY.items():
        try:
            ort_type = ort.OrtValue.ortvalue_from_shape_and_type([0], np_type).data_type()
        except Exception:  # noqa: BLE001 - ONNX Runtime makes no such OrtValue
            continue
        found.setdefault(ort_type, config_type)
    return found


def _named(kind, names):
    """"input 'a' is", "inputs 'a', 'b' are"."""
    return f"{kind} {_quoted(names)} is" if len(names) == 1 else f"{kind}s {_quoted(names)} are"


def _quoted(names):
    return ", ".join(f"'{name}'" for name in names)
