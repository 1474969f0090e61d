"""The search machinery: Hyperband sweeps, the step-budget pool, the throughput harness, arms."""
