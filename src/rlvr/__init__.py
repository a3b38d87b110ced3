"""rlvr: multi-turn RL for LLM agents with turn-level credit assignment, on verifiers."""

__version__ = "0.1.0"
