"""The intervention GUI: a web page that shows each actor's cameras, who is in control and how learning goes, and
takes over, labels, pauses and e-stops (`robo-rl gui`; `robo-rl train gui=true`).

  bridge.py      the actor's side: telemetry out and the page's input in, on its own thread (never blocks the loop)
  actor_view.py  what the actor reports: mode, episode, frames, learner health
  server.py      the GUI process: actors over ZeroMQ, pages over a WebSocket (Starlette + uvicorn)
  messages.py    the actor ↔ GUI message kinds and their checked fields
  static/        the page (plain HTML/JS, no build step)
"""
