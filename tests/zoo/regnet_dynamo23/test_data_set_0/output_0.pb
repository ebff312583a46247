
BlogitsJ(¼ÿ<ƒœ<	ð9»*—¼Þæm<tUF;<ÕA<Ng=:}»?Îl»