"""Scrambled Sobol points: the quasi-random trials of the study's search.

Sobol's sequence (Bratley and Fox, ACM TOMS 14, 1988) with the direction numbers of Joe and
Kuo, "Constructing Sobol sequences with better two-dimensional projections" (SIAM J. Sci.
Comput. 30, 2008), in Gray-code order. In dimension ``j`` the direction numbers
``v_k = m_k / 2^k`` follow from the primitive polynomial of degree ``s`` with inner
coefficients ``a_1 .. a_{s-1}`` (the bits of ``a``, ``a_1`` the highest):

```
m_k = 2 a_1 m_{k-1} XOR 4 a_2 m_{k-2} XOR ... XOR 2^(s-1) a_{s-1} m_{k-s+1}
      XOR 2^s m_{k-s} XOR m_{k-s}
```

and point ``i`` is the XOR of the ``v_k`` of the set bits of ``gray(i) = i XOR (i >> 1)``.
The scramble is Matousek's random linear scramble with a digital shift ("On the L2-discrepancy
for anchored boxes", J. Complexity 14, 1998): each coordinate's bits are multiplied by a random
lower-triangular binary matrix with a unit diagonal, then XORed with random bits. It keeps the
net property (the first ``2^m`` points put exactly one point in each of ``2^m`` equal
intervals of every coordinate) and moves the unscrambled sequence off its corner point 0.

The random bits come from Python's `random.Random`, whose stream for a seed is part of
Python's compatibility promise, so a study resumed under another NumPy draws the same points.
"""

import random

import numpy as np

BITS = 30

# Joe and Kuo's "new-joe-kuo-6.21201" direction numbers for dimensions 2..8: (s, a, m_1..m_s).
# Dimension 1 is van der Corput's sequence (every m_k = 1).
_DIRECTIONS = (
    (1, 0, (1,)),
    (2, 1, (1, 3)),
    (3, 1, (1, 3, 1)),
    (3, 2, (1, 1, 1)),
    (4, 1, (1, 1, 3, 3)),
    (4, 4, (1, 3, 5, 13)),
    (5, 2, (1, 1, 5, 5, 17)),
)
MAX_DIMENSIONS = len(_DIRECTIONS) + 1


def direction_numbers(dimension):
    """The ``BITS`` direction numbers ``v_1 .. v_BITS`` of coordinate ``dimension`` (0-based)
    as integers, ``v_k * 2^BITS``."""
    if dimension == 0:
        m = [1] * BITS
    else:
        degree, coefficients, initial = _DIRECTIONS[dimension - 1]
        m = list(initial)
        for k in range(degree, BITS):
            value = m[k - degree] ^ (m[k - degree] << degree)
            for j in range(1, degree):
                if (coefficients >> (degree - 1 - j)) & 1:
                    value ^= m[k - j] << j
            m.append(value)
    return [m[k] << (BITS - 1 - k) for k in range(BITS)]


def _scrambled(directions, generator):
    """``directions`` multiplied by a random lower-triangular binary matrix with a unit
    diagonal (row ``r`` gives output bit ``r``, counted from the most significant, from the
    input bits ``0 .. r``)."""
    rows = []
    for row in range(BITS):
        own_bit = 1 << (BITS - 1 - row)
        higher_bits = generator.getrandbits(row) << (BITS - row) if row else 0
        rows.append(own_bit | higher_bits)
    return [
        sum(1 << (BITS - 1 - row) for row, mask in enumerate(rows) if bin(mask & v).count("1") % 2)
        for v in directions
    ]


def sobol_points(count, dimensions, seed=None):
    """The first ``count`` points of the ``dimensions``-dimensional Sobol sequence in
    ``[0, 1)``, scrambled with ``seed`` (None: not scrambled, the sequence starting at 0);
    an array of shape ``(count, dimensions)``. ``count`` a power of 2 keeps the net property.

    Raises:
        ValueError: ``dimensions`` outside ``[1, MAX_DIMENSIONS]`` or ``count`` < 1.
    """
    if not 1 <= dimensions <= MAX_DIMENSIONS:
        raise ValueError(f"dimensions must be in [1, {MAX_DIMENSIONS}], got {dimensions}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    generator = None if seed is None else random.Random(seed)
    points = np.zeros((count, dimensions))
    for dimension in range(dimensions):
        directions = direction_numbers(dimension)
        shift = 0
        if generator is not None:
            directions = _scrambled(directions, generator)
            shift = generator.getrandbits(BITS)
        for index in range(count):
            gray = index ^ (index >> 1)
            value = shift
            for bit in range(BITS):
                if (gray >> bit) & 1:
                    value ^= directions[bit]
            points[index, dimension] = value / 2**BITS
    return points
