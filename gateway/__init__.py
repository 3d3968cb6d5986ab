"""llm-gateway: one URL that speaks OpenAI, FriendliAI, Scale SGP and OctoAI."""

__version__ = "0.1.0"
