"""The agent: settings today; the runtime, model backends, sandbox and memory next."""
