"""One schema per Parquet table, in one place.

Tables (under a run folder, hive-partitioned by low-cardinality keys):
  episodes/stage=S/<episode_id>.a<attempt>.parquet   one row per episode attempt
  llm_calls/stage=S/<episode_id>.a<attempt>.parquet  one row per model call
  pool/agents.parquet                                the pool (so empty matrix cells exist)
  routing/method=M/epoch=E/part.parquet              Model Selector decisions
  routing_matrix/method=M/epoch=E/part.parquet       the Ability Matrix a method routed with
  task_types/part.parquet                            each selected task's type (fixed per run)
  selection/part.parquet                             the tasks the run selected (test / train)
  uses/method=M/<stage>-e<epoch>-<hash>.parquet      which episodes each method used (an
                                                     episode two methods share is listed
                                                     under both)
"""

from __future__ import annotations

import pyarrow as pa

EPISODE_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("method", pa.string()),
    ("epoch", pa.int32()),
    ("domain", pa.string()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("trial", pa.int32()),
    ("attempt", pa.int32()),
    ("episode_id", pa.string()),
    ("agent", pa.string()),
    ("model", pa.string()),
    ("prompt_strategy", pa.string()),
    ("user_model", pa.string()),
    ("solo", pa.bool_()),
    ("status", pa.string()),  # ok | error (infrastructure: crash, timeout, server errors)
    ("reward", pa.float64()),  # null on error rows
    ("success", pa.bool_()),  # reward >= 1 - 1e-6; null on error rows
    ("termination", pa.string()),
    ("error", pa.string()),
    ("num_messages", pa.int32()),
    ("agent_prompt_tokens", pa.int64()),
    ("agent_completion_tokens", pa.int64()),
    ("user_prompt_tokens", pa.int64()),
    ("user_completion_tokens", pa.int64()),
    ("llm_calls", pa.int32()),
    ("wall_s", pa.float64()),
    ("started_at", pa.float64()),
    ("seed", pa.int64()),
    ("observed_text", pa.string()),  # what the agent saw of the task (retrieval key)
    ("experiences", pa.list_(pa.string())),
    ("retrieved_item_ids", pa.list_(pa.string())),
    ("retrieved_banks", pa.list_(pa.string())),
    ("messages_json", pa.string()),
    ("reward_json", pa.string()),
    # unique per written attempt (RunStore.write_episode): its call rows carry it too, so
    # calls of an attempt whose row was lost (a damaged segment set aside and re-run as
    # the same attempt number) are told apart and not counted (results.views.llm_calls)
    ("attempt_id", pa.string()),
])

CALL_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("role", pa.string()),
    ("agent", pa.string()),
    ("model", pa.string()),
    ("task_id", pa.string()),
    ("trial", pa.int32()),
    ("episode_id", pa.string()),
    ("epoch", pa.int32()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("latency_s", pa.float64()),
    ("attempts", pa.int32()),
    ("ok", pa.bool_()),
    ("error", pa.string()),
    ("started_at", pa.float64()),
    ("seed", pa.int64()),  # the sampling seed the request carried
    ("request_hash", pa.string()),  # fingerprint of the request (seed diversity check)
    # stage prompts only (null otherwise): the transcripts' characters whole, what the
    # prompt kept of them, and whether every final state stayed whole (prompts.budget)
    ("evidence_chars", pa.int64()),
    ("evidence_kept", pa.int64()),
    ("evidence_final_kept", pa.bool_()),
    # the server's usage was missing or not a valid count: the tokens are null (unknown)
    ("usage_invalid", pa.bool_()),
    # episode calls only (null for stage jobs): the attempt and its attempt_id
    ("attempt", pa.int32()),
    ("attempt_id", pa.string()),
])

POOL_SCHEMA = pa.schema([
    ("agent", pa.string()),
    ("model", pa.string()),
    ("prompt_strategy", pa.string()),
    ("is_executor", pa.bool_()),
])

ROUTING_SCHEMA = pa.schema([  # routing/method=M/epoch=E/part.parquet: one row per test task
    ("run_id", pa.string()),
    ("method", pa.string()),
    ("epoch", pa.int32()),
    ("domain", pa.string()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("solver", pa.string()),
    ("basis", pa.string()),  # task_type | domain | prior | fixed | random
    ("score", pa.float64()),
    ("attempts", pa.int64()),
])

ROUTING_MATRIX_SCHEMA = pa.schema([  # routing_matrix/method=M/epoch=E/part.parquet
    ("run_id", pa.string()),
    ("level", pa.string()),  # task_type | domain (the selector's fallback row)
    ("key", pa.string()),  # the task type or the domain
    ("agent", pa.string()),
    ("attempts", pa.int64()),  # finished construction executions
    ("successes", pa.int64()),
    ("errors", pa.int64()),
    ("score", pa.float64()),  # successes / attempts; null = no attempt (the prior decides)
])

TASK_TYPE_SCHEMA = pa.schema([  # task_types/part.parquet: the run's task types
    ("run_id", pa.string()),
    ("domain", pa.string()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("basis", pa.string()),  # the key that typed it (domain / observed_cluster / ...)
])

SELECTION_SCHEMA = pa.schema([  # selection/part.parquet: one row per selected task
    ("run_id", pa.string()),
    ("selection", pa.string()),  # test | train
    ("split", pa.string()),
    ("domain", pa.string()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
])

USES_SCHEMA = pa.schema([  # uses/method=M/...: one row per (method, episode) it used
    ("run_id", pa.string()),
    ("stage", pa.string()),
    ("epoch", pa.int32()),
    ("episode_id", pa.string()),
    ("memory_key", pa.string()),  # what memory the episode was given (null = none)
    # "" = the method as configured; "poison@0.1" = its inference on the contaminated
    # copy of its frozen bank (method_results labels it "<method>+poison@0.1")
    ("condition", pa.string()),
])
