"""t2t-export round trip: load the SavedModel in a fresh process and decode strings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from toy_model import toy_model  # noqa: F401  (session fixture)

LOADER = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops the signature uses

serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(inputs=tf.constant(["a b c", "j i h g", ""]))
result = {"outputs": [x.decode() for x in out["outputs"].numpy()], "scores": out["scores"].numpy().tolist()}
# More strings than the exported batch size: decoded a batch at a time, in order, each as
# it is decoded in a smaller request.
many = serve(inputs=tf.constant(["b b", "c a", "i h", "a b c", "j i h g", "", "e f"]))
result["many"] = [x.decode() for x in many["outputs"].numpy()]
result["none"] = serve(inputs=tf.constant([], tf.string))["outputs"].numpy().tolist()
print(json.dumps(result))
"""


def test_export_round_trip(binary, toy_model, tmp_path):  # noqa: F811
    export_dir = tmp_path / "export"
    proc = binary(
        "t2t-export",
        f"--model_dir={toy_model['model_dir']}",
        f"--export_dir={export_dir}",
        "--decode_hparams=batch_size=4,beam_size=2",
    )
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip().splitlines()[-1]
    assert os.path.dirname(path) == str(export_dir) and os.path.basename(path).isdigit()
    info = json.load(open(os.path.join(path, "t2t_export.json")))
    assert info["decode"]["beam_size"] == 2 and info["batch_size"] == 4

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    loaded = subprocess.run(
        [sys.executable, "-c", LOADER, path], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert loaded.returncode == 0, loaded.stderr
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert result["outputs"][:2] == ["a b c", "j i h g"]
    assert len(result["outputs"]) == 3 and len(result["scores"]) == 3
    assert all(s <= 0 for s in result["scores"])
    assert result["many"][3:6] == result["outputs"] and len(result["many"]) == 7
    assert result["none"] == []
