#!/usr/bin/env python3
"""Makes tests/data/datasets: the same documents as JSON Lines and in the columnar formats
users bring from the HF ecosystem, written by pyarrow and `datasets` themselves, so that
zerotrain's readers (src/io/arrow_ipc.cpp, parquet_text.cpp, hf_dataset_dir.cpp) are
checked against the real writers (tests/unit/data_formats_test.cpp,
tests/e2e/prepare_formats_test.cpp):

  python3 -m venv /tmp/arrow-venv && /tmp/arrow-venv/bin/pip install pyarrow datasets
  /tmp/arrow-venv/bin/python3 tools/make_data_fixtures.py tests/data/datasets

Every file holds DOCS in order under the column `text` (documents that are null in a
columnar file are absent from docs.jsonl: readers skip nulls):
  docs.jsonl          {"id", "text"} per line: the reference
  docs.stream.arrow   Arrow IPC *stream* (what save_to_disk writes), 3 record batches;
                      columns id:int64, tags:list<string>, meta:struct<source:string,
                      score:double>, text:string, so the text column's buffers come after
                      nested ones
  docs.file.arrow     Arrow IPC *file* ("ARROW1", footer), text:large_string with a null
                      row, 2 record batches
  docs.zstd.arrow     an IPC stream with zstd-compressed bodies (refused, with the fix)
  docs.parquet        Parquet, 2 row groups, snappy (pyarrow's default)
  save_to_disk/       datasets.Dataset.save_to_disk(num_shards=2): data-0000N-of-00002.arrow
                      (IPC streams), dataset_info.json, state.json
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

DOCS = [
    "Hello world! It's a test.",
    "  leading spaces\nand lines\n",
    "Unicode: caf\u00e9 \u65e5\u672c \U0001f389",
    "numbers 12345 and   gaps",
    "a",
    "The last document, longer than the others: " + "words " * 20,
]


def table(text_type=pa.string(), nulls=()):
    texts = list(DOCS)
    for i in nulls:
        texts.insert(i, None)
    n = len(texts)
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "tags": pa.array([["t%d" % i] * (i % 3) for i in range(n)], pa.list_(pa.string())),
        "meta": pa.array([{"source": "s%d" % i, "score": i / 2} for i in range(n)],
                         pa.struct([("source", pa.string()), ("score", pa.float64())])),
        "text": pa.array(texts, text_type),
    })


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "docs.jsonl"), "w", encoding="utf-8") as f:
        for i, d in enumerate(DOCS):
            f.write(json.dumps({"id": i, "text": d}, ensure_ascii=False) + "\n")

    t = table()
    with ipc.new_stream(os.path.join(out, "docs.stream.arrow"), t.schema) as w:
        for batch in t.to_batches(max_chunksize=2):
            w.write_batch(batch)

    tf = table(pa.large_string(), nulls=(2,)).select(["id", "text"])
    with ipc.new_file(os.path.join(out, "docs.file.arrow"), tf.schema) as w:
        for batch in tf.to_batches(max_chunksize=4):
            w.write_batch(batch)

    opts = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_stream(os.path.join(out, "docs.zstd.arrow"), t.schema, options=opts) as w:
        w.write_table(t)

    pq.write_table(t, os.path.join(out, "docs.parquet"), row_group_size=4)

    import datasets  # only for the save_to_disk folder

    ds = datasets.Dataset.from_dict({"id": list(range(len(DOCS))), "text": DOCS})
    ds.save_to_disk(os.path.join(out, "save_to_disk"), num_shards=2)
    print("wrote", out, "with pyarrow", pa.__version__, "and datasets", datasets.__version__)


if __name__ == "__main__":
    main()
