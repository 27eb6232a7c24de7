 19:42:41 up  2:07,  0 user,  load average: 2.04, 1.78, 1.42
