"""The agent, with no console: its settings, the model backends (`backends`), the runtime
that runs a session tick by tick (`runtime`), the sandbox model code runs in (`sandbox`),
tasks, task families and benchmark suites (`tasks`), the approval gate, retrieval memory, and
batches of sessions (`batch`). Never imports Textual or `training`."""
