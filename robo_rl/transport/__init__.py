"""ZeroMQ transport between actors and the learner: data (PUSH/PULL), weights (PUB/SUB), ctrl (DEALER/ROUTER)."""
