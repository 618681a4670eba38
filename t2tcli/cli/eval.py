"""t2t-eval: metrics of checkpoints on a split; --wait follows a training run."""

from __future__ import annotations

from absl import flags, logging

from t2tcli.cli import common
from t2tcli.errors import UserError

flags.DEFINE_string("checkpoint", "latest", "Which checkpoints: latest, all, or STEP[,STEP...].")
flags.DEFINE_enum("split", "dev", ["dev", "test"], "Which split to decode and score.")
flags.DEFINE_boolean(
    "wait", False, "Follow a training run: evaluate every checkpoint not evaluated yet, then each new one."
)
flags.DEFINE_float(
    "wait_timeout", 3600, "--wait: stop after this many seconds without a new checkpoint (training finished or died)."
)
flags.DEFINE_float("wait_poll_seconds", 10, "--wait: how often to look for new checkpoints.")
flags.DEFINE_integer(
    "max_examples",
    0,
    "Score only the first N examples of each problem's split (0: all); a self-supervised problem's examples are "
    "the corrupted pieces its texts are cut into, so N counts pieces, not texts.",
)
flags.DEFINE_string(
    "decode_hparams", "", 'Decode settings as for t2t-decode, e.g. "beam_size=4,alpha=0.6,batch_size=64".'
)
flags.DEFINE_boolean("tensorboard", True, "Also write TensorBoard summaries to the results directory.")
flags.DEFINE_string(
    "eval_dir",
    None,
    "Where results, predictions and summaries go (default: model_dir/eval_<split>); lets a read-only model_dir "
    "be evaluated.",
)

FLAGS = flags.FLAGS


def main() -> None:
    common.require("model_dir")
    if FLAGS.wait_timeout <= 0:
        raise UserError("--wait_timeout must be positive")
    from t2tcli.decode import engines
    from t2tcli.decode import settings as decode_settings
    from t2tcli.evaluate import evaluation, following, results
    from t2tcli.io import lock
    from t2tcli.model import checkpoints, loading

    results_dir = results.writable_results_dir(FLAGS.model_dir, FLAGS.split, FLAGS.eval_dir)

    if FLAGS.wait:
        following.wait_for_run(FLAGS.model_dir, FLAGS.wait_timeout, FLAGS.wait_poll_seconds)
    model = loading.load(FLAGS.model_dir, FLAGS.problem, FLAGS.hparams, FLAGS.trust_usr_dir)
    decode_hp = decode_settings.parse_decode_hparams(FLAGS.decode_hparams, model.hparams, model.vocab.vocab_size)
    decode_settings.refuse_beam_output(decode_hp, "t2t-eval scores the best decode")
    selected = [] if FLAGS.wait else checkpoints.select(FLAGS.model_dir, FLAGS.checkpoint)
    data_dir = FLAGS.data_dir or model.info.data_dir
    if model.problem is None or not data_dir:
        raise UserError("this model_dir was trained on no problem: pass --problem and --data_dir to evaluate it")
    lengths = (int(model.hparams.inputs_length), int(model.hparams.targets_length))
    tasks = evaluation.tasks_for(model.problem, data_dir, FLAGS.split, FLAGS.max_examples, lengths)
    decoder = engines.Decoder(model, decode_hp)
    sink = results.ResultsSink(results_dir, tensorboard=FLAGS.tensorboard)
    evaluator = evaluation.Evaluator(
        decoder,
        tasks,
        loading.text_decoder(model.vocab),
        decoder.inputs_length,
        decoder.targets_length,
        sink,
        FLAGS.split,
    )
    records: list[dict] = []

    def evaluate(step: int, path: str) -> None:
        # Pinned: the trainer may delete it meanwhile; one deleted before is CheckpointGone.
        with checkpoints.pinned(path) as readable:
            new = evaluator.evaluate(step, path, readable)
        records.extend(new)
        for r in new:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in r["metrics"].items())
            logging.info("step %d %s (%d examples): %s", step, r["problem"], r["examples"], shown)

    with lock.hold(results_dir, "evaluation results"):
        _evaluate_all(model_dir=FLAGS.model_dir, selected=selected, evaluate=evaluate, sink=sink)
    if not records and not FLAGS.wait:
        raise UserError(f"no checkpoint of {FLAGS.model_dir} could be evaluated (see the warnings above)")
    logging.info("results in %s", sink.path)
    print(results.table(records), flush=True)


def _evaluate_all(model_dir: str, selected: list[tuple[int, str]], evaluate, sink) -> None:
    from t2tcli.evaluate import following
    from t2tcli.model import checkpoints

    if FLAGS.wait:
        if FLAGS.checkpoint != "latest":
            logging.warning("--wait evaluates every checkpoint not evaluated yet; --checkpoint is ignored")
        outcome = following.follow(
            model_dir,
            evaluate,
            skip=sink.evaluated_steps(FLAGS.split),
            wait_timeout=FLAGS.wait_timeout,
            poll_seconds=FLAGS.wait_poll_seconds,
        )
        logging.info("stopped following: %s", outcome.reason)
        return
    if FLAGS.checkpoint == "all":
        _evaluate_every(model_dir, selected, evaluate)
        return
    for step, path in selected:
        try:
            evaluate(step, path)
        except checkpoints.CheckpointGone as exc:
            if FLAGS.checkpoint != "latest":
                logging.warning("%s; skipped", exc)
                continue
            evaluate(*checkpoints.resolve(model_dir, None))  # the trainer saved a newer one meanwhile


def _evaluate_every(model_dir: str, listed: list[tuple[int, str]], evaluate) -> None:
    """--checkpoint=all beside a running trainer: the checkpoints it saved in place of those it
    deleted before they could be read are evaluated too, so a --keep_checkpoint_max=1 run still
    yields a result. Only a few rounds: this is no follower (that is --wait)."""
    from t2tcli.model import checkpoints

    pending = listed
    for _ in range(5):
        skipped = False
        for step, path in pending:
            try:
                evaluate(step, path)
            except checkpoints.CheckpointGone as exc:
                logging.warning("%s; skipped", exc)
                skipped = True
        if not skipped:
            return
        newest = max(step for step, _ in pending)
        pending = [(s, p) for s, p in checkpoints.list_checkpoints(model_dir) if s > newest]
        if not pending:
            return
        logging.info("evaluating the checkpoints saved since: steps %s", ", ".join(str(s) for s, _ in pending))


def run() -> None:
    common.run(main)
