"""Two parameter points used across the bounds tests (every symbol given, extras ignored)."""

import pytest

P1 = dict(n=1000, N=20, M=10, d=50, eps=0.5, delta=1e-5, L=2.0, beta=3.0, mu=0.5, Delta=4.0,
          upsilon=0.7, R=30, K=25, q=4, T=500, eta=1 / 6, sigma1=0.2, sigma2=0.3, S=3, E=2)
P2 = dict(n=50000, N=7, M=7, d=3, eps=2.0, delta=1e-8, L=0.5, beta=10.0, mu=1.0, Delta=0.3,
          upsilon=2.0, R=200, K=100, q=9, T=1e4, eta=0.05, sigma1=0.05, sigma2=1.5, S=1, E=5)


@pytest.fixture(params=[P1, P2], ids=["P1", "P2"])
def point(request):
    return dict(request.param)
