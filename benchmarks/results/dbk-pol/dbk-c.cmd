neuralgp fit --dataset uci/pol --model dbk --seed 0 --no-correction
