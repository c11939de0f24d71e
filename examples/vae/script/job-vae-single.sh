#!/bin/bash
# VAE with PyTorch's DataLoader and FORKED workers reading a method-1 store
# (Frontier or Perlmutter, one or more nodes).
#
#   sbatch -A <project> examples/vae/script/job-vae-single.sh [--num-workers 4]
#   (other data: DDSTORE_VAE_DATA=/path/to/fashion-mnist sbatch ..., or --data DIR;
#   a directory of MNIST-format idx files, plain or .gz)
#
# Forked workers open their own reader (PyDDStore.fork_reader) on their first
# read.  DDSTORE_FORK_WORKERS=1 must be set before libfabric starts: it makes
# pyddstore set FI_MR_CACHE_MONITOR=memhooks when the variable is unset or
# kdreg2 (Frontier's default kdreg2 does not work in forked processes;
# without it the workers raise an error).  Forked workers read into host
# memory only (--gpu-dest is ignored there; --gpu-source works).
#SBATCH -J ddstore-vae-fork
#SBATCH -N 1
#SBATCH -t 00:20:00
#SBATCH -o %x-%j.out
#SBATCH --network=single_node_vni,job_vni
set -euo pipefail

source "${DDSTORE_VENV:-$HOME/ddstore/.venv}/bin/activate"
cd "${DDSTORE_TOP:-$HOME/ddstore}"

export DDSTORE_METHOD=1
export DDSTORE_FABRIC=cxi
export DDSTORE_FORK_WORKERS=1
export FI_CXI_DISABLE_HOST_REGISTER=1
NT=$(( SLURM_JOB_NUM_NODES * ${RANKS_PER_NODE:-4} ))

srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" --gpus-per-task=1 \
    python examples/vae/vae-ddp.py --loader torch --num-workers "${WORKERS:-4}" "$@"
