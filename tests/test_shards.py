"""The TFRecord framing datagen writes without TensorFlow must be TensorFlow's, byte for byte."""

from t2tcli.compat import tf
from t2tcli.data.datagen.shards import tfrecord_bytes


def test_tfrecord_bytes_match_tensorflow_writer(tmp_path):
    records = [b"", b"x", bytes(range(256)) * 40, "é\n".encode()]
    ours = tmp_path / "ours.tfrecord"
    ours.write_bytes(tfrecord_bytes(records))
    theirs = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in records:
            writer.write(record)
    assert ours.read_bytes() == theirs.read_bytes()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == records


def test_no_records_frame_to_no_bytes():
    assert tfrecord_bytes([]) == b""
