"""The one LLM client of the project (client.py: the Anthropic Messages API, retries, costs) and
the price table (pricing.py): used by the Claude proposer, the LLM judge and the arms."""
