"""Torch networks only: encoders, actors, critic ensembles. The actor process ships a policy from here."""
