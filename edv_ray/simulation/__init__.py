"""``engine: simulated`` — a model server whose behaviour is a planted profile.

No model runs: each request's OpenAI ``user`` tag names the role, agent, task and episode,
and the engine answers as the profile (``edv_ray.config_simulation``) plants — acting
agents play the benchmark for real (gold path or a planted failure, graded by the
benchmark), experiences carry hidden truth tags, verifiers / judges approve and pick with
planted probabilities. Every draw is keyed by (seed, agent, episode, what), so runs
reproduce. A benchmark is reached only through the environment protocol: its
``simulated_player()`` plays it. Modules:

  server.py     Simulator (one request → one answer), the threaded HTTP server, and
                SimulatedServer (a child process behind serving.protocol.ModelServer)
  acting.py     role agent / user_sim: the success decision, handed to the benchmark's player
  stages.py     distiller, verifier, judge, self-judge, extractor, any other JSON role
  outcomes.py   a stage prompt's runs: planted outcome, whose run
  prompt_read.py  reading a request: the experiences block, run blocks, sections
  lessons.py    the text of written experiences;  schema_fill.py  any JSON schema
  codec.py      seeded draws, hidden item tags and run markers (HMAC under the secret)
  planted.py    the planted probabilities;  world.py  tasks, planted task types, players
  oracle.py     the same numbers from outside, for validation (never used by the framework)
"""
