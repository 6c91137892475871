"""The validation split by key (raycache._fit.split)."""


import numpy as np


def test_the_key_split_is_zlib_crc32_of_each_keys_text_whatever_its_length_or_type():
    import zlib

    import pyarrow as pa

    from raycache._fit.split import BUCKETS, validation_mask

    keys = [pa.array(np.arange(-1000, 20_000, 7, dtype=np.int64)),
            pa.array(["", "é", "日本語", "x" * 64, "y" * 65, "row-17"]),
            pa.chunked_array([pa.array(["k1", "k22"]), pa.array(["k333"])]),
            pa.array([1.5, 2.0, -3.25])]  # no vectorised form: zlib key by key
    for column in keys:
        want = [zlib.crc32(str(k).encode()) % BUCKETS < 3_000 for k in column.to_pylist()]
        assert validation_mask(column, 0.3).to_pylist() == want
