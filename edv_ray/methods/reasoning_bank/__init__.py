"""ReasoningBank (arXiv 2509.25140), faithful to its paper, on edv-ray's harness.

For each pool agent (model), in task order: retrieve (the agent's own bank; the k = 1
most similar past *task query* → all its items) → act → the same model judges its run
WITHOUT the reward → extracts ≤ 3 items (title / one-sentence description / content):
strategies from a judged success, lessons from a judged failure → plain append. The
judge's label is stored beside the true reward (``rb_judge_audit``: P(judge = success |
reward = 0), the self-confirmation trap for RB).

Settings: the EDV comparison (default) builds the banks over the training tasks in
``epochs``, then every agent runs the test tasks with retrieval and no learning (stage
``rb_infer``; after every epoch with ``eval_after_each_epoch``, each evaluation seeing
only what was learned up to its epoch); ``stream_on_test`` is RB's own setting (the test
tasks are the stream; stage ``rb_stream``). Retrieval returns the items of the k most
similar distinct past tasks of the same domain (each task's latest entry). MaTTS
``parallel``: k rollouts per task (stage ``rb_stream_matts`` on the test stream), one
self-contrast extraction over them (≤ 5 items) and, for the reported score, the model's
own best-of-k pick (a pick that failed scores as a failure; a task whose learning step
errored scores as an error until resumed). Sequential MaTTS (re-examining within an episode) is not implemented:
the config rejects it with a clear message.

The package holds no code of its own: importing its config module loads no run code.
ReasoningBank registers itself from :mod:`edv_ray.methods.reasoning_bank.plugin` (listed in
:data:`edv_ray.plugins.BUILTIN`).
"""
