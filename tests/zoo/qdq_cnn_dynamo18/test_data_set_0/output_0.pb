
BlogitsJ(zT>zT=“Ñ§;%èÉ¾ža>“Ñ'>øÅQ¾y>*Àf>*Àf½