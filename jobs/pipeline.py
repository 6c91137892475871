"""Job entrypoint: ray job submit --working-dir . -- python jobs/pipeline.py --config FILE.yaml"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # raycache from the working_dir

from raycache._cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["pipeline", *sys.argv[1:]]))
