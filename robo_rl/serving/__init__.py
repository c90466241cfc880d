"""A base policy served to actors on other machines (`robo-rl policy serve`): a big policy (a VLA) on a GPU box,
the robot PC's actor asking for chunks (`policy.base.kind=remote`, policies/remote.py).

  served.py  what is served: a base loaded by the existing loaders, with the inputs its checkpoint was made for,
             and the checks a request must pass before the policy sees it
  server.py  the ZeroMQ ROUTER that answers `info` and `chunk` requests (policies/remote_protocol.py's messages)
"""
