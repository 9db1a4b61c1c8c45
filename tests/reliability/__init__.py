"""The reliability suite: attacks, concurrency, dying servers, malformed output, bad input,
killed workers. Every test here drives real parts (the sandbox, SQLite files, the tiny model,
a vLLM server, detached training workers) the way a user or a model would break them."""
