#!/bin/bash
# VAE without MPI: ranks from srun, DDP over NCCL/RCCL, ddstore method 1 with
# its address exchange over the DDP group (--comm torch; DDSTORE_MPI=0 makes
# that the default).
#
#   sbatch -A <project> examples/vae/script/job-vae-torch.sh
#   (other data: DDSTORE_VAE_DATA=/path/to/fashion-mnist sbatch ..., or --data DIR;
#   a directory of MNIST-format idx files, plain or .gz)
#SBATCH -J ddstore-vae-torch
#SBATCH -N 2
#SBATCH -t 00:20:00
#SBATCH -o %x-%j.out
#SBATCH --network=single_node_vni,job_vni
set -euo pipefail

source "${DDSTORE_VENV:-$HOME/ddstore/.venv}/bin/activate"
cd "${DDSTORE_TOP:-$HOME/ddstore}"

export DDSTORE_MPI=0
export DDSTORE_FABRIC=cxi
export FI_CXI_DISABLE_HOST_REGISTER=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=${MASTER_PORT:-29517}
NT=$(( SLURM_JOB_NUM_NODES * ${RANKS_PER_NODE:-4} ))

srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" --gpus-per-task=1 \
    python examples/vae/vae-ddp.py --comm torch --num-workers 1 "$@"
