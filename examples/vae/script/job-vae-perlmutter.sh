#!/bin/bash
# VAE with DDP on Perlmutter (NERSC): NVIDIA A100, Slingshot 11 (cxi).
#
#   sbatch -A <account> examples/vae/script/job-vae-perlmutter.sh [vae-ddp.py options]
#   (other data: DDSTORE_VAE_DATA=/path/to/fashion-mnist sbatch ..., or --data DIR;
#   a directory of MNIST-format idx files, plain or .gz)
#SBATCH -J ddstore-vae
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -N 2
#SBATCH --gpus-per-node=4
#SBATCH -t 00:20:00
#SBATCH -o %x-%j.out
#SBATCH --network=single_node_vni,job_vni
set -euo pipefail

module load PrgEnv-gnu cray-mpich cudatoolkit libfabric
source "${DDSTORE_VENV:-$HOME/ddstore/.venv}/bin/activate"
cd "${DDSTORE_TOP:-$HOME/ddstore}"

export DDSTORE_METHOD=${METHOD:-1}
export DDSTORE_FABRIC=cxi
# Perlmutter leaves FI_MR_CACHE_MONITOR unset (the default, memhooks,
# userfaultfd and disabled all work, forked workers included) and already
# defaults FI_CXI_DISABLE_HOST_REGISTER=1.
export MPICH_GPU_SUPPORT_ENABLED=0
export OMP_NUM_THREADS=16
NT=$(( SLURM_JOB_NUM_NODES * 4 ))

srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" -c 32 --gpus-per-task=1 --gpu-bind=none \
    python examples/vae/vae-ddp.py --num-workers=1 --threads 16 "$@"

if [ "$DDSTORE_METHOD" != 0 ]; then
    srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" -c 32 --gpus-per-task=1 --gpu-bind=none \
        python examples/vae/vae-ddp.py --num-workers=1 --threads 16 --gpu-dest --gpu-source "$@"
fi
