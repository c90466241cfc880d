"""Learner-side algorithms: everything the actor does not need (critics, targets, temperature, optimisers)."""
