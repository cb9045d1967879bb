# Speedup over the serial loop of every runtime and access, regular and irregular chunk
# durations side by side. Called by run.sh with csv= and png= set.
set datafile separator ','
set terminal pngcairo size 1100,460 font ',10' noenhanced
set output png
set multiplot layout 1,2 title 'Histogram: 2^26 values, 1,024 bins, 256 chunks (speedup over the serial loop)'
set style fill solid 0.8 border -1
set boxwidth 0.7
set yrange [0:*]
set grid ytics
set xtics rotate by -45 nomirror
set ylabel 'speedup'
do for [kind in 'regular irregular'] {
  set title kind.' chunk durations'
  plot '< grep "^'.kind.',"  '.csv using 0:6:(strcol(3) eq 'reduce' ? 3 : strcol(3) eq 'commute' ? 2 : 1):xtic(strcol(2).' '.strcol(3)) \
      with boxes lc variable notitle
}
unset multiplot
