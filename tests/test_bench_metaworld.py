"""bench/metaworld.py's acting wrappers: a generative base sampled from narrower initial noise, reproducibly, and at
zero noise its mode (the baselines RL from a flow or a SmolVLA is compared with)."""

import numpy as np

from bench.metaworld import ScaledNoise, ZeroNoise


class EchoNoise:
    """A base whose chunk is the initial noise it is given."""

    action_dim, chunk_size, noise_shape = 2, 3, (3, 2)

    def reset(self) -> None:
        pass

    def predict_chunk(self, obs: dict, noise=None) -> np.ndarray:
        return noise


def test_scaled_noise_draws_from_its_seed_at_its_std_and_zero_noise_gives_the_mode():
    scaled = ScaledNoise(EchoNoise(), 0.5, seed=7)
    first, second = scaled.predict_chunk({}), scaled.predict_chunk({})
    expected = 0.5 * np.random.default_rng(7).standard_normal((2, 3, 2))
    np.testing.assert_allclose(np.stack([first, second]), expected, rtol=1e-6)
    assert first.dtype == np.float32 and not np.allclose(first, second)
    again = ScaledNoise(EchoNoise(), 0.5, seed=7).predict_chunk({})
    np.testing.assert_array_equal(again, first)
    assert not ZeroNoise(EchoNoise()).predict_chunk({}).any()
