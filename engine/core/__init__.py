"""The ground floor every topic stands on; it imports no topic, no loader and no job server.

- the loop and its one door to the model (loop), cooperative cancellation (cancel), the compiled engine mode
  behind it (compiled), a padded batch of rows through it (batch);
- what one run records (trace; predictions at every position: predictions), KV accounting (kv), sampling,
  prompts and their token strings (prompt);
- what a load produces (loaded: LoadedModel, ModelInfo), the architecture facts read from a model (arch,
  archfacts), the measuring hooks installed at load (instrument), the server's log through stdlib logging (logs).
"""
