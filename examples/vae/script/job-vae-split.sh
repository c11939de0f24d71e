#!/bin/bash
# Method 2: a core job step publishes Fashion-MNIST (vae_core_server.py), an
# extra job step trains on it (vae_extra_train.py) reading with
# DistDatasetReader.  Both steps run in ONE Slurm job.
#
#   sbatch -A <project> examples/vae/script/job-vae-split.sh
#   (other data: DDSTORE_VAE_DATA=/path/to/fashion-mnist sbatch ..., or --data DIR;
#   a directory of MNIST-format idx files, plain or .gz)
#
# Slingshot VNIs: by default every job step gets its own VNI and the cxi
# provider cannot reach endpoints of another step.  --network=job_vni gives
# the job a VNI that all its steps share (single_node_vni also allocates VNIs
# for single-node steps), so the extra step can read the core step's memory.
# Two separate sbatch jobs cannot share a VNI unless the site configures one.
#SBATCH -J ddstore-vae-split
#SBATCH -N 2
#SBATCH -t 00:30:00
#SBATCH -o %x-%j.out
#SBATCH --network=single_node_vni,job_vni
set -euo pipefail

source "${DDSTORE_VENV:-$HOME/ddstore/.venv}/bin/activate"
cd "${DDSTORE_TOP:-$HOME/ddstore}"

export DDSTORE_FABRIC=cxi
export FI_CXI_DISABLE_HOST_REGISTER=1
# one run namespace for both steps: the extra step accepts only records of
# this job's core step (leftovers of an earlier job in $HS are rejected)
export DDSTORE_EXCHANGE_NS="job$SLURM_JOB_ID"
HS=${HANDSHAKE_DIR:-$SCRATCH/ddstore-hs-$SLURM_JOB_ID}   # shared filesystem (Lustre)
mkdir -p -m 700 "$HS"
NCORE=${NCORE:-4}
NEXTRA=${NEXTRA:-4}

srun --network=single_node_vni,job_vni -N 1 -n "$NCORE" --gpus-per-task=1 --exact \
    python examples/vae/vae_core_server.py --handshake-dir "$HS" &
CORE=$!
srun --network=single_node_vni,job_vni -N 1 -n "$NEXTRA" --gpus-per-task=1 --exact \
    python examples/vae/vae_extra_train.py --handshake-dir "$HS" --n-core "$NCORE" \
    --num-workers 1 "$@"
wait "$CORE"
rm -rf "$HS"
