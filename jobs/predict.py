"""Job entrypoint: ray job submit --working-dir . -- python jobs/predict.py --checkpoint CKPT
--input FILE --output FILE.parquet (the arguments of `raycache predict`)"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # raycache from the working_dir

from raycache._cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["predict", *sys.argv[1:]]))
