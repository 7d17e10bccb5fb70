neuralgp fit --dataset uci/pol --model dbk --seed 0 --rank 1 --no-correction
