#!/bin/sh
# Writes a tiny Fashion-MNIST in IDX form (plain, under the .gz names that `depengine train
# --data` reads; zlib reads plain files as well): COUNT (1 to 255) training and as many test
# images of 28x28, pixel i of image k being (k + i) mod 256, labels k mod 10.
#   tiny_fashion_mnist.sh DIR COUNT
set -eu
export LC_ALL=C  # awk prints %c of 128-255 as one byte, not as UTF-8
dir=$1 count=$2
mkdir -p "$dir"
# The big-endian 32-bit integer $1, as IDX stores its magic and sizes.
u32() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
pixels() { awk -v n="$1" 'BEGIN { for (k = 0; k < n; k++) for (i = 0; i < 784; i++) printf "%c", (k + i) % 256 }'; }
labels() { awk -v n="$1" 'BEGIN { for (k = 0; k < n; k++) printf "%c", k % 10 }'; }
for split in train t10k; do
  { u32 2051; u32 "$count"; u32 28; u32 28; pixels "$count"; } > "$dir/$split-images-idx3-ubyte.gz"
  { u32 2049; u32 "$count"; labels "$count"; } > "$dir/$split-labels-idx1-ubyte.gz"
done
