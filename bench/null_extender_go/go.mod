module lyra.dev/bench/nullextender

go 1.22
