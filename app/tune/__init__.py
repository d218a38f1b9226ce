"""Tuning and its checks: ``python -m app tune`` measures every candidate on this CPU (`tuner`, `trial`,
`candidates`, `ranking`, `outputcheck`) and writes a manifest (`manifest`) the server reads at start (`choice`);
``python -m app.tune.build`` is the image build's ahead-of-time compile.
"""
